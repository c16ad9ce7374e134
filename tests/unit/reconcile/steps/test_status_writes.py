"""A pass hands its status to its group's writer and returns: no reconcile worker waits for a
write token to report what it did (reconcile/steps/status_later.py). With the real Reconciler over
a cluster whose status patches wait until the test lets them through."""

from __future__ import annotations

import asyncio
from typing import Any

from gitea_runner_operator.reconcile.steps.status_later import LaterWrites
from tests.support.builders import VALID
from tests.support.fake_cluster import (
    KEY,
    Clock,
    FakeCache,
    FakeCluster,
    FakeSources,
    fresh_reconciler,
    snapshot,
)


class SlowStatus(FakeCluster):
    """Status patches wait for ``gate`` (a write limit out of tokens); ``fail`` makes them
    fail instead."""

    def __init__(self) -> None:
        super().__init__(watch="eager")
        self.gate = asyncio.Event()
        self.patches: list[dict[str, Any]] = []
        self.fail = False

    async def patch_group_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        await self.gate.wait()
        if self.fail:
            raise RuntimeError("the API server said no")
        self.patches.append(status)
        await super().patch_group_status(namespace, name, status)


def _world(writes: LaterWrites) -> tuple[Any, SlowStatus, FakeSources]:
    cluster = SlowStatus()
    sources = FakeSources(snapshot(queued=1))
    cache = FakeCache(cluster, {**VALID, "maxActiveRunners": 5})
    clock = Clock()
    rec = fresh_reconciler(cache, cluster, sources, clock, lambda: 1767225630.0,
                           status_writes=writes)  # fmt: skip
    return rec, cluster, sources


async def _returns(coro: Any) -> bool:
    """Whether the pass returns while its status patch still waits (bounded: a pass that
    waits for the patch never returns here)."""
    task = asyncio.ensure_future(coro)
    done, _ = await asyncio.wait([task], timeout=5)
    if not done:
        task.cancel()
    return bool(done)


async def test_a_pass_creates_and_returns_while_its_status_patch_waits_for_a_token():
    writes = LaterWrites()
    rec, cluster, _ = _world(writes)
    assert await _returns(rec.reconcile(KEY))
    assert len(cluster.jobs) == 1  # the runner was created
    assert cluster.patches == []  # its status is still waiting
    cluster.gate.set()
    await writes.close()
    (written,) = cluster.patches
    assert written["activeRunners"] == 1


async def test_a_newer_status_replaces_one_not_yet_written():
    writes = LaterWrites()
    rec, cluster, sources = _world(writes)
    assert await _returns(rec.reconcile(KEY))  # the writer takes this one and waits
    await asyncio.sleep(0)
    for queued in (2, 3):  # more jobs each time: another status each time
        sources.source.latest = snapshot(queued=queued, started_at=float(queued))
        assert await _returns(rec.reconcile(KEY))
    cluster.gate.set()
    await writes.close()
    assert [p["queuedJobs"] for p in cluster.patches] == [1, 3]  # the second never written


async def test_a_failed_status_patch_gives_the_group_back_to_the_work_queue():
    again: list[str] = []
    writes = LaterWrites(retry=again.append)
    rec, cluster, _ = _world(writes)
    cluster.fail = True
    cluster.gate.set()
    await rec.reconcile(KEY)
    await writes.close()
    assert again == [KEY]


async def test_a_newer_status_handed_while_a_patch_fails_is_still_written():
    """The writer's patch fails while a newer status waits behind it: the group's retry
    pass writes that newer status (before: it stayed pending with no writer, and the retry
    pass, computing the same status, took it as handed over already)."""
    again: list[str] = []
    writes = LaterWrites(retry=again.append)
    rec, cluster, sources = _world(writes)
    assert await _returns(rec.reconcile(KEY))  # the writer takes this one and waits
    await asyncio.sleep(0)
    sources.source.latest = snapshot(queued=2, started_at=2.0)
    assert await _returns(rec.reconcile(KEY))  # a newer status, pending
    cluster.fail = True
    cluster.gate.set()
    for _ in range(20):  # the writer fails its patch and gives the group back
        await asyncio.sleep(0)
    assert again == [KEY]
    cluster.fail = False
    assert await _returns(rec.reconcile(KEY))  # the retry: same inputs, same status
    await writes.close()
    assert [p["queuedJobs"] for p in cluster.patches] == [2]
