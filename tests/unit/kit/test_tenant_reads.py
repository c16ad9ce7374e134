"""The read rate tenants' polls share: what one namespace reads slows its own polls only."""

from __future__ import annotations

import pytest

from gitea_runner_operator.kit.tenant_reads import KIB, MIN_SHARE, PRUNE_EVERY, ReadShares
from tests.support.clock import FakeTime


def _shares(rate: float = 1000.0, burst: float = 500.0) -> tuple[ReadShares, FakeTime]:
    clock = FakeTime()
    return ReadShares(rate, burst, active_for=60.0, clock=clock), clock


def test_a_namespace_alone_reads_at_the_whole_rate() -> None:
    shares, _ = _shares()
    shares.charge("team-a", 2500)  # 500 saved up, 2,000 owed
    assert shares.share() == 1000.0
    assert shares.wait("team-a") == pytest.approx(2.0)


def test_the_rate_is_divided_equally_by_the_namespaces_that_read() -> None:
    shares, _ = _shares(rate=1024 * KIB, burst=512 * KIB)
    for namespace in ("team-a", "team-b", "team-c", "evil"):
        shares.charge(namespace, 0)
    shares.charge("evil", 2560 * KIB)  # 2 MiB owed
    assert shares.share() == 256 * KIB
    assert shares.wait("evil") == pytest.approx(8.0)  # at 256 KiB a second


def test_one_namespace_in_debt_never_makes_another_wait() -> None:
    shares, _ = _shares()
    shares.charge("evil", 1_000_000)
    shares.charge("team-a", 100)
    assert shares.wait("evil") > 100
    assert shares.wait("team-a") == 0.0


def test_the_debt_is_repaid_at_the_share_and_then_polls_go() -> None:
    shares, clock = _shares()
    shares.charge("evil", 1500)  # 1,000 owed
    clock.now += 0.5
    assert shares.wait("evil") == pytest.approx(0.5)
    clock.now += 0.5
    assert shares.wait("evil") == 0.0


def test_a_woken_poll_goes_first_until_its_namespace_owes_more_than_a_burst() -> None:
    shares, _ = _shares()
    shares.charge("team-a", 900)  # 400 owed: a poll nobody woke waits, a pickup does not
    assert shares.wait("team-a") > 0
    assert shares.wait("team-a", woken=True) == 0.0
    shares.charge("team-a", 300)  # 700 owed: past a burst, its wakes are no way around it
    assert shares.wait("team-a", woken=True) == pytest.approx(0.2)


def test_the_groups_of_a_namespace_go_one_after_another_when_its_debt_is_repaid() -> None:
    # Forty groups that waited for the same debt would all see it repaid at once; the first
    # to go holds what the namespace's last fetch read, and the others wait on.
    shares, clock = _shares()
    shares.charge("evil", 1200)  # its last fetch read 1,200 (700 owed)
    clock.now += 0.7
    assert shares.wait("evil") == 0.0
    held = shares.reserve("evil")
    assert held == 1200
    assert shares.wait("evil") == pytest.approx(1.2)  # the next group waits
    shares.charge("evil", 1200)  # the first group's fetch read as much again
    shares.release("evil", held)
    assert shares.wait("evil") == pytest.approx(1.2)  # charged once, not twice


def test_a_shared_answer_costs_the_groups_that_reserved_for_it_nothing() -> None:
    shares, _ = _shares()
    shares.charge("team-a", 200)
    held = shares.reserve("team-a")
    shares.release("team-a", held)  # its poll was answered by another group's fetch
    assert shares.owed("team-a") == 0.0
    assert shares.wait("team-a") == 0.0


def test_namespaces_that_stopped_reading_are_let_go_unless_they_owe() -> None:
    shares, clock = _shares(rate=1000.0)
    for i in range(100):
        shares.charge(f"team-{i}", 10)
    shares.charge("evil", 10_000_000)
    assert len(shares) == 101
    clock.now += 61.0 + PRUNE_EVERY
    shares.charge("team-0", 10)
    assert len(shares) == 2  # team-0 reads on, evil still owes
    assert shares.wait("evil") > 0


def test_no_namespace_is_charged_for_a_deleting_groups_last_ask() -> None:
    shares, _ = _shares()
    shares.charge("", 10_000)
    assert len(shares) == 0
    assert shares.wait("") == 0.0


def test_a_rate_or_burst_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        ReadShares(0)


def test_among_very_many_namespaces_each_still_reads_its_minimum_share() -> None:
    # An equal part of 4 MiB/s among 1,000 namespaces is 4 KiB/s: one Forgejo job list of
    # 4 MiB would have held that tenant's polls back for 17 minutes.
    shares = ReadShares(4096 * KIB, burst=4096 * KIB, clock=FakeTime())
    for i in range(1000):
        shares.charge(f"team-{i}", 0)
    shares.charge("team-0", 8192 * KIB)  # 4 MiB owed
    assert shares.share() == MIN_SHARE
    assert shares.wait("team-0") == pytest.approx(64.0)
    assert ReadShares(16 * KIB).share() == 16 * KIB  # never more than the rate itself
