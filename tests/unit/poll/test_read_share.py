"""A poll waits for its namespace's share of the read rate (kit/tenant_reads.py): one tenant's
many groups of big answers stretch their own polls, never another tenant's (issue 45)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from gitea_runner_operator.api.observation import Observation, Snapshot
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec, parse_spec
from gitea_runner_operator.kit.tenant_reads import KIB, ReadShares
from gitea_runner_operator.poll.pacing import Pacing
from gitea_runner_operator.poll.poller import GroupPoller
from tests.support.builders import VALID


def _spec(poll: str = "20ms") -> RunnerGroupSpec:
    return parse_spec(VALID).model_copy(update={"poll_interval": poll})


class Gitea:
    """Each fetch is charged what it read, as the forge's fetcher does."""

    def __init__(self, reads: ReadShares, sizes: dict[str, int]) -> None:
        self.reads, self.sizes = reads, sizes
        self.fetches: dict[str, int] = dict.fromkeys(sizes, 0)

    async def observe(self, namespace: str, spec: Any, *_: Any) -> tuple[Snapshot, None]:
        await asyncio.sleep(0)
        self.fetches[namespace] += 1
        self.reads.charge(namespace, self.sizes[namespace])
        snap = Snapshot(time.monotonic(), "x", observation=Observation(queued=(), runners=()))
        return snap, None


def _poller(key: str, gitea: Gitea, reads: ReadShares) -> GroupPoller:
    pacing = Pacing(min_refresh=0.02)
    return GroupPoller(key, _spec(), gitea.observe, lambda _k: None, pacing=pacing, reads=reads)


async def test_many_groups_of_big_answers_poll_at_their_namespaces_share_and_others_poll_on():
    # Before: each of the ten groups read 128 KiB every 20 ms, 64 MiB/s, all of it on the
    # loop every tenant shares; the other tenant's group was asked as often as before.
    reads = ReadShares(256 * KIB, burst=32 * KIB)
    gitea = Gitea(reads, {"evil": 128 * KIB, "team-a": KIB})
    pollers = [_poller(f"evil/g{i}", gitea, reads) for i in range(10)]
    pollers.append(_poller("team-a/ci", gitea, reads))
    started = time.monotonic()
    for poller in pollers:
        poller.start()
    try:
        await asyncio.sleep(1.0)
    finally:
        for poller in pollers:
            await poller.stop()
    elapsed = time.monotonic() - started
    share = 256 * KIB / 2
    # What evil read: its burst, its share for the time, and the fetches that went before
    # the first charge was known (one per group at the start) and the one under way.
    bound = 32 * KIB + share * elapsed + 11 * 128 * KIB
    assert gitea.fetches["evil"] * 128 * KIB <= bound
    assert gitea.fetches["evil"] < 25  # against about 500 without the share
    assert gitea.fetches["team-a"] >= 20  # every 20 ms or so, as if evil were not there


@pytest.mark.parametrize(
    ("burst", "read", "before", "after"),
    [
        # The second poll left 20,000 owed (2 s of waiting); a pickup goes at once.
        (100_000, 60_000, 2, 3),
        # 30,000 owed, more than a burst: its own deliveries are no way around its share.
        (10_000, 40_000, 1, 1),
    ],
    ids=["owing-less-than-a-burst", "owing-more-than-a-burst"],
)
async def test_a_wake_up_goes_first_unless_its_namespace_owes_more_than_a_burst(
    burst: int, read: int, before: int, after: int
):
    reads = ReadShares(10_000, burst=burst)
    gitea = Gitea(reads, {"team-a": read})
    poller = _poller("team-a/ci", gitea, reads)
    poller.start()
    try:
        await asyncio.sleep(0.1)
        assert gitea.fetches["team-a"] == before
        poller.wake()
        await asyncio.sleep(0.2)
        assert gitea.fetches["team-a"] == after
        assert poller.running and not poller.hung
    finally:
        await poller.stop()


async def test_a_restarted_poll_task_waits_for_its_namespaces_share_too():
    # Each spec edit restarts the group's task; a first poll that ignored the debt would let
    # a tenant that edits its groups read past its share.
    reads = ReadShares(10_000, burst=10_000)
    reads.charge("evil", 40_000)  # 30,000 owed: 3 s
    gitea = Gitea(reads, {"evil": 40_000})
    poller = _poller("evil/g0", gitea, reads)
    poller.start()
    try:
        await asyncio.sleep(0.2)
        assert gitea.fetches["evil"] == 0
    finally:
        await poller.stop()
