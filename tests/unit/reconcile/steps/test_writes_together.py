"""Writes a pass awaits that do not depend on each other are sent together, so the pass waits
for one answer of the API server, not for one after another (kit/together.py): a teardown's
deletes; those that do depend on each other are not: a new group's finalizer, then its first
status. Each write here waits until the test lets the API server answer, and counts as sent
when it reaches it."""

from __future__ import annotations

import asyncio
from typing import Any

from gitea_runner_operator.reconcile.reconciler import FINALIZER
from tests.support.builders import VALID
from tests.support.fake_cluster import KEY, T0, FakeCluster, make, snapshot


class WaitingApiServer(FakeCluster):
    """Finalizer, status and delete writes wait for ``answer``; ``sent`` names each write that
    reached the API server."""

    def __init__(self) -> None:
        super().__init__(watch="eager")
        self.answer = asyncio.Event()
        self.sent: list[str] = []

    async def set_finalizers(
        self, namespace: str, name: str, finalizers: list[str], resource_version: str
    ) -> None:
        self.sent.append("finalizer")
        await self.answer.wait()
        await super().set_finalizers(namespace, name, finalizers, resource_version)

    async def patch_group_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.sent.append("status")
        await self.answer.wait()
        await super().patch_group_status(namespace, name, status)

    async def delete_job(self, namespace: str, name: str) -> bool:
        self.sent.append(f"delete {name}")
        await self.answer.wait()
        return await super().delete_job(namespace, name)


async def _sent_before_any_answer(cluster: WaitingApiServer, coro: Any) -> list[str]:
    """What the pass sent while no answer had come, then let the API server answer."""
    task = asyncio.ensure_future(coro)
    for _ in range(20):
        await asyncio.sleep(0)
    sent = list(cluster.sent)
    cluster.answer.set()
    await asyncio.wait_for(task, 5)
    return sent


async def test_a_new_groups_first_status_waits_for_its_finalizer():
    """Not together: the finalizer is a compare-and-swap on the version the pass read, and a
    status patch moves that version (sent together, 63 first passes of the platform's burst
    failed with 409 Conflict and were retried with back-off)."""
    cluster = WaitingApiServer()
    cluster.finalizers = []  # a group the operator has not seen before
    reconciler, _, _ = make(cluster, snapshot(queued=1))
    sent = await _sent_before_any_answer(cluster, reconciler.reconcile(KEY))
    assert sent == ["finalizer"]
    assert FINALIZER in cluster.finalizers
    assert cluster.status is not None  # Reconciling, for a GitOps tool's health check


async def test_a_teardown_deletes_its_runner_jobs_together():
    cluster = WaitingApiServer()
    cluster.answer.set()
    first, _, _ = make(cluster, snapshot(queued=3))
    await first.reconcile(KEY)
    assert len(cluster.jobs) == 3
    cluster.answer.clear()
    cluster.deletion = "2026-01-01T00:01:00Z"
    # A spec that no longer reads: nothing to ask Gitea with, the Jobs go at once.
    broken = {**VALID, "maxActiveRunners": "many"}
    teardown, _, _ = make(cluster, snapshot(), spec=broken, wall=T0 + 90)
    sent = await _sent_before_any_answer(cluster, teardown.reconcile(KEY))
    assert len([s for s in sent if s.startswith("delete ")]) == 3
    assert cluster.jobs == {}
