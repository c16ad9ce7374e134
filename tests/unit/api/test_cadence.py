"""The poll interval that follows the webhook evidence (api/cadence.py): stretched only while
deliveries are known to arrive, and back to ``spec.pollInterval`` on each sign of a miss."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gitea_runner_operator.api.cadence import (
    DELIVERY_WINDOW,
    Cadence,
    CadenceReason,
    Evidence,
    decide,
    stretch_of,
)

BASE, STRETCHED, NOW = 15.0, 300.0, 10_000.0


def _decide(evidence: Evidence, **kw: object) -> Cadence:
    args: dict[str, object] = {
        "now": NOW,
        "base": BASE,
        "stretched": STRETCHED,
        "webhook": True,
        "active": False,
        "managed": True,
        "hook_ok": True,
    }
    args.update(kw)
    return decide(evidence, **args)  # type: ignore[arg-type]


HEARD = Evidence(last_delivery=NOW - 30)


def test_a_quiet_group_whose_deliveries_arrive_polls_at_the_stretched_interval():
    cadence = _decide(HEARD)
    assert cadence == Cadence(STRETCHED, CadenceReason.DELIVERING)
    assert cadence.delay(NOW, BASE) == STRETCHED


def test_a_group_without_a_webhook_polls_as_today_whatever_was_heard():
    assert _decide(HEARD, webhook=False) == Cadence(BASE, CadenceReason.NO_WEBHOOK)


def test_a_group_with_runner_jobs_alive_does_not_stretch():
    assert _decide(HEARD, active=True) == Cadence(BASE, CadenceReason.RUNNERS_ACTIVE)


def test_a_managed_hook_that_fails_or_is_not_confirmed_yet_shrinks_the_poll():
    for hook_ok in (False, None):
        assert _decide(HEARD, hook_ok=hook_ok).reason is CadenceReason.HOOK_NOT_HEALTHY


def test_a_hook_kept_by_hand_stretches_on_deliveries_alone():
    assert _decide(HEARD, managed=False, hook_ok=None).reason is CadenceReason.DELIVERING


def test_a_restart_or_a_hand_over_starts_with_no_evidence():
    assert _decide(Evidence()) == Cadence(BASE, CadenceReason.STARTED)
    handed = Evidence(CadenceReason.HANDED_OVER)
    assert _decide(handed) == Cadence(BASE, CadenceReason.HANDED_OVER)


def test_a_poll_that_found_an_unannounced_job_shrinks_until_the_next_delivery():
    missed = Evidence(last_delivery=NOW - 30, last_miss=NOW - 10)
    assert _decide(missed) == Cadence(BASE, CadenceReason.MISSED)
    forgiven = Evidence(last_delivery=NOW - 5, last_miss=NOW - 10)
    assert _decide(forgiven).reason is CadenceReason.DELIVERING


def test_a_delivery_gap_longer_than_the_window_shrinks_the_poll():
    old = Evidence(last_delivery=NOW - DELIVERY_WINDOW)
    assert _decide(old) == Cadence(BASE, CadenceReason.GAP)


def test_a_quiet_group_stays_stretched_while_its_gitea_delivers_to_other_groups():
    """A quiet repository hears nothing for days; deliveries from its Gitea to other groups
    say the way in works. Its own first delivery is still needed after a start."""
    old = Evidence(last_delivery=NOW - 5 * DELIVERY_WINDOW)
    cadence = _decide(old, gitea_heard=NOW - 60)
    assert cadence.reason is CadenceReason.DELIVERING
    assert cadence.delay(NOW, BASE) == STRETCHED
    assert _decide(old, gitea_heard=NOW - DELIVERY_WINDOW).reason is CadenceReason.GAP
    assert _decide(Evidence(), gitea_heard=NOW - 60).reason is CadenceReason.STARTED
    missed = Evidence(last_delivery=NOW - 300, last_miss=NOW - 10)
    assert _decide(missed, gitea_heard=NOW - 1).reason is CadenceReason.MISSED


def test_a_stretched_sleep_ends_when_the_window_does():
    near = Evidence(last_delivery=NOW - DELIVERY_WINDOW + 100)
    cadence = _decide(near)
    assert cadence.reason is CadenceReason.DELIVERING
    assert cadence.delay(NOW, BASE) == 100
    late = Evidence(last_delivery=NOW - DELIVERY_WINDOW + 1)
    assert _decide(late).delay(NOW, BASE) == BASE  # never below spec.pollInterval


def test_the_stretch_is_bounded_by_the_platform_and_never_below_the_groups_own():
    assert stretch_of(15, 300, 900) == 300
    assert stretch_of(15, 3600, 900) == 900
    assert stretch_of(60, 30, 900) == 60
    assert stretch_of(15, None, 900) == 15


@given(
    last_delivery=st.one_of(st.none(), st.floats(NOW - 2 * DELIVERY_WINDOW, NOW)),
    last_miss=st.one_of(st.none(), st.floats(NOW - 2 * DELIVERY_WINDOW, NOW)),
    origin=st.sampled_from([CadenceReason.STARTED, CadenceReason.HANDED_OVER]),
    webhook=st.booleans(),
    active=st.booleans(),
    managed=st.booleans(),
    hook_ok=st.sampled_from([None, False, True]),
    base=st.floats(5, 600),
    wanted=st.floats(5, 3600),
    platform=st.floats(5, 3600),
)
def test_the_interval_is_stretched_only_with_every_piece_of_evidence(
    last_delivery, last_miss, origin, webhook, active, managed, hook_ok, base, wanted, platform
):
    stretched = stretch_of(base, wanted, platform)
    evidence = Evidence(origin, last_delivery, last_miss)
    cadence = decide(
        evidence,
        now=NOW,
        base=base,
        stretched=stretched,
        webhook=webhook,
        active=active,
        managed=managed,
        hook_ok=hook_ok,
    )
    every_piece = (
        webhook
        and not active
        and (not managed or hook_ok is True)
        and last_delivery is not None
        and (last_miss is None or last_miss < last_delivery)
        and NOW - last_delivery < DELIVERY_WINDOW
    )
    assert cadence.reason.stretched == every_piece
    delay = cadence.delay(NOW, base)
    # Never shorter than the group's own interval, never past the platform's bound.
    assert base <= delay <= max(base, platform)
    if not every_piece:
        assert delay == base
