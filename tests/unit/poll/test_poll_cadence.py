"""A group's poll task follows the webhook evidence (api/cadence.py, poll/deliveries.py):
its poll stretches while deliveries arrive and comes back to ``spec.pollInterval`` at once
on a poll that finds an unannounced job, a failing hook, a restart or a hand-over."""

from __future__ import annotations

import asyncio
from typing import Any

from gitea_runner_operator.api.cadence import Cadence, CadenceReason
from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.hooks import HookStatus
from gitea_runner_operator.api.observation import Observation, Snapshot
from gitea_runner_operator.api.runnergroup import parse_spec
from gitea_runner_operator.metrics import Metrics
from gitea_runner_operator.poll.pacing import Pacing
from gitea_runner_operator.poll.poller import GroupPoller
from gitea_runner_operator.poll.pollers import Pollers
from tests.support.builders import VALID

KEY = "team-a/ci"
HOOKED = {
    **VALID,
    "pollInterval": "15s",
    "webhook": {"secretRef": {"name": "hook", "key": "secret"}, "pollInterval": "5m"},
}


def _job(job_id: int, labels: tuple[str, ...] = ("app-infra",)) -> ActionJob:
    return ActionJob(id=job_id, run_id=1, name="build", labels=list(labels), status="queued")


def _snap(*jobs: ActionJob) -> Snapshot:
    return Snapshot(0.0, "x", observation=Observation(queued=tuple(jobs), runners=()))


class Gitea:
    """Answers each observation with the next queue (the last one repeats)."""

    def __init__(self, *queues: tuple[ActionJob, ...]) -> None:
        self.queues = list(queues) or [()]
        self.calls = 0

    async def observe(self, namespace: str, spec: Any, newer_than: float) -> tuple[Snapshot, None]:
        self.calls += 1
        return _snap(*self.queues[min(self.calls - 1, len(self.queues) - 1)]), None


def _poller(gitea: Gitea, raw: dict[str, Any] = HOOKED, **options: Any) -> GroupPoller:
    spec = parse_spec(raw)
    return GroupPoller(KEY, spec, gitea.observe, lambda key: None, **options)


async def _polls(poller: GroupPoller, gitea: Gitea, n: int) -> None:
    """Wait until ``n`` observations were made (each past the first woken, paced)."""
    for _ in range(200):
        if gitea.calls >= n and not poller.asking:
            await asyncio.sleep(0.01)
            return
        if poller.cadence is not None and gitea.calls < n:
            poller.wake(paced=True)
        await asyncio.sleep(0.01)
    raise AssertionError(f"{gitea.calls} observations, wanted {n}")


async def test_a_quiet_group_whose_deliveries_arrive_polls_at_its_webhook_interval():
    gitea = Gitea()
    poller = _poller(gitea)
    poller.heard()
    poller.start()
    try:
        await _polls(poller, gitea, 1)
        assert poller.cadence == Cadence(300.0, CadenceReason.DELIVERING)
        assert poller._until - poller._last_start > 280  # sleeping the stretched interval
    finally:
        await poller.stop()


async def test_a_group_without_a_webhook_polls_at_its_poll_interval_as_today():
    gitea = Gitea()
    poller = _poller(gitea, VALID)
    poller.heard()  # a system hook's delivery: no hook of its own to vouch for
    poller.start()
    try:
        await _polls(poller, gitea, 1)
        assert poller.cadence == Cadence(15.0, CadenceReason.NO_WEBHOOK)
        assert poller._until - poller._last_start <= 15 * 1.05
    finally:
        await poller.stop()


async def test_a_restarted_operator_polls_at_the_poll_interval_until_a_delivery_comes():
    gitea = Gitea()
    poller = _poller(gitea)
    poller.start()
    try:
        await _polls(poller, gitea, 1)
        assert poller.cadence == Cadence(15.0, CadenceReason.STARTED)
        poller.heard()
        await _polls(poller, gitea, 2)
        assert poller.cadence is not None and poller.cadence.reason is CadenceReason.DELIVERING
    finally:
        await poller.stop()


async def test_a_poll_that_finds_an_unannounced_job_shrinks_at_once_and_a_delivery_restores():
    gitea = Gitea((), (_job(7),), (_job(7), _job(8)), (_job(7), _job(8)))
    shrinks: list[tuple[Cadence | None, Cadence]] = []
    metrics = Metrics()
    poller = _poller(
        gitea,
        on_cadence=lambda key, before, after: (
            shrinks.append((before, after)),
            metrics.cadence.changed(before, after),
        ),
    )
    poller.heard()
    poller.start()
    try:
        await _polls(poller, gitea, 1)
        assert poller.cadence is not None and poller.cadence.reason is CadenceReason.DELIVERING
        await _polls(poller, gitea, 2)  # job 7: no delivery announced it (it was lost)
        assert poller.cadence == Cadence(15.0, CadenceReason.MISSED)
        assert poller._until - poller._last_start <= 15 * 1.05
        assert poller.deliveries.missed == 1
        poller.heard(8)  # job 8's delivery arrives: the hook works again
        await _polls(poller, gitea, 3)
        assert poller.cadence is not None and poller.cadence.reason is CadenceReason.DELIVERING
        assert poller.deliveries.missed == 1  # job 8 was announced
    finally:
        await poller.stop()
    assert [after.reason for _, after in shrinks] == [
        CadenceReason.DELIVERING,
        CadenceReason.MISSED,
        CadenceReason.DELIVERING,
    ]
    text = metrics.render().decode()
    assert 'gitea_runner_operator_poll_interval_shrinks_total{reason="MissedDelivery"} 1.0' in text


async def test_a_job_the_group_cannot_take_is_no_missed_delivery():
    gitea = Gitea((), (_job(7, ("windows",)),))
    poller = _poller(gitea)
    poller.heard()
    poller.start()
    try:
        await _polls(poller, gitea, 2)
        assert poller.cadence is not None and poller.cadence.reason is CadenceReason.DELIVERING
    finally:
        await poller.stop()


async def test_a_failing_managed_hook_shrinks_the_poll():
    raw = {**HOOKED, "webhook": {**HOOKED["webhook"], "manageHook": True}}
    gitea = Gitea()
    poller = _poller(gitea, raw)
    poller.heard()
    poller.hooks.hook = HookStatus(True, "HookRegistered", "ok")
    poller.start()
    try:
        await _polls(poller, gitea, 1)
        assert poller.cadence is not None and poller.cadence.reason is CadenceReason.DELIVERING
        poller.hooks.hook = HookStatus(False, "HookFailed", "Gitea answered 500")
        await _polls(poller, gitea, 2)
        assert poller.cadence == Cadence(15.0, CadenceReason.HOOK_NOT_HEALTHY)
    finally:
        await poller.stop()


async def test_runner_jobs_alive_keep_the_poll_short_and_a_started_one_cuts_a_long_sleep():
    gitea = Gitea()
    alive = False
    poller = _poller(gitea, active=lambda key: alive)
    poller.heard()
    poller.start()
    try:
        await _polls(poller, gitea, 1)
        assert poller._until - poller._last_start > 280
        alive = True
        poller.shrink()  # the controller's Job informer: a runner Job was added
        assert poller._until - poller._last_start <= 15
        await _polls(poller, gitea, 2)
        assert poller.cadence == Cadence(15.0, CadenceReason.RUNNERS_ACTIVE)
    finally:
        await poller.stop()


async def test_a_hand_over_cuts_a_stretched_sleep_and_starts_without_evidence():
    gitea = Gitea()
    poller = _poller(gitea)
    poller.heard()
    poller.start()
    try:
        await _polls(poller, gitea, 1)
        assert poller._until - poller._last_start > 280
        poller.handed_over()
        assert poller._until - poller._last_start <= 15
        await _polls(poller, gitea, 2)
        assert poller.cadence == Cadence(15.0, CadenceReason.HANDED_OVER)
    finally:
        await poller.stop()


async def test_a_group_taken_over_before_its_poller_starts_begins_handed_over():
    gitea = Gitea()
    pollers = Pollers(gitea.observe, lambda key: None, pacing=Pacing())
    pollers.handed_over(KEY)
    poller = await pollers.ensure(KEY, parse_spec(HOOKED))
    try:
        await _polls(poller, gitea, 1)
        assert poller.cadence == Cadence(15.0, CadenceReason.HANDED_OVER)
        assert pollers.cadences() == {CadenceReason.HANDED_OVER: 1}
    finally:
        await pollers.stop_all()


async def test_a_new_spec_keeps_the_evidence_unless_the_hook_changed():
    gitea = Gitea()
    pollers = Pollers(gitea.observe, lambda key: None, pacing=Pacing())
    first = await pollers.ensure(KEY, parse_spec(HOOKED))
    first.heard()
    try:
        labels = await pollers.ensure(KEY, parse_spec({**HOOKED, "maxActiveRunners": 5}))
        assert labels is not first and labels.deliveries is first.deliveries
        other = {**HOOKED, "webhook": {**HOOKED["webhook"], "secretRef": {"name": "x", "key": "y"}}}
        rehooked = await pollers.ensure(KEY, parse_spec(other))
        assert rehooked.deliveries.evidence.last_delivery is None
    finally:
        await pollers.stop_all()


async def test_deliveries_to_other_groups_of_its_gitea_keep_a_quiet_group_stretched():
    """A quiet repository's own hook may stay silent for days; the group keeps its stretched
    poll while its Gitea's deliveries reach this replica for other groups."""
    from gitea_runner_operator.api.cadence import DELIVERY_WINDOW

    gitea, now = Gitea(), [1000.0]
    pollers = Pollers(gitea.observe, lambda key: None, pacing=Pacing(), clock=lambda: now[0])
    quiet = await pollers.ensure(KEY, parse_spec(HOOKED))
    await pollers.ensure("team-b/ci", parse_spec(HOOKED))
    try:
        pollers.heard(KEY, None)  # the quiet group's own hook worked once
        now[0] += 2 * DELIVERY_WINDOW
        quiet.hooks.hook = HookStatus(True, "HookKept", "")
        quiet._follow_evidence()
        assert quiet.cadence is not None and quiet.cadence.reason is CadenceReason.GAP
        pollers.heard("team-b/ci", 7)  # another group of the same Gitea hears a delivery
        quiet._follow_evidence()
        assert quiet.cadence is not None and quiet.cadence.reason is CadenceReason.DELIVERING
    finally:
        await pollers.stop_all()
