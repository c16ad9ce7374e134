"""One tenant's burst of writes must not fill the API server ahead of another tenant's runner
create (issue 45): while the write limit's tokens are plenty (its burst), fair turns for
tokens order nothing, and every write went out at once; the API server (and the client's
connection queue) then served the other tenant's create behind all of them."""

from __future__ import annotations

import asyncio
from typing import Any

from gitea_runner_operator.kube.cluster import Cluster
from gitea_runner_operator.kube.ratelimit import WRITES_PER_NAMESPACE, TokenBucket
from tests.support.api_response import FakeResponse

BURST = 200  # one tenant's first passes: finalizers, status, Events, runner Jobs


class BusyServer:
    """A Jobs API that holds the busy tenant's creates until released, and notes how many
    of them were in flight when each other create arrived."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.in_flight: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.ahead_of_other: list[int] = []

    async def create_namespaced_job(self, namespace: str, manifest: Any, **_: Any) -> Any:
        if namespace != "busy":
            self.ahead_of_other.append(self.in_flight.get("busy", 0))
        else:
            self.in_flight["busy"] = self.in_flight.get("busy", 0) + 1
            self.most["busy"] = max(self.most.get("busy", 0), self.in_flight["busy"])
            try:
                await self.release.wait()
            finally:
                self.in_flight["busy"] -= 1
        return FakeResponse(201, b'{"metadata": {"name": "%s"}}' % manifest["name"].encode())


async def test_another_tenant_s_create_is_sent_with_few_of_a_busy_tenant_s_writes_ahead():
    server = BusyServer()
    cluster = Cluster(object(), limiter=TokenBucket(qps=1000, burst=1000))  # type: ignore[arg-type]
    cluster._batch = server
    burst = [
        asyncio.create_task(
            cluster.create_job({"metadata": {"namespace": "busy"}, "name": f"busy-{i}"})
        )
        for i in range(BURST)
    ]
    for _ in range(5):
        await asyncio.sleep(0)
    created = await cluster.create_job({"metadata": {"namespace": "other"}, "name": "runner-1"})
    server.release.set()
    names = await asyncio.gather(*burst)
    assert created == "runner-1"
    assert len(set(names)) == BURST  # the busy tenant's writes all went through, in turn
    # Before: all 200 were at the server when the other tenant's create arrived.
    assert server.ahead_of_other == [WRITES_PER_NAMESPACE]
    assert server.most["busy"] == WRITES_PER_NAMESPACE


class SharedServer:
    """A Jobs API that answers each create after a few turns of the loop, as a busy API
    server shares itself among the requests it holds, and notes how many of the busy
    tenants' creates it held when another tenant's arrived."""

    def __init__(self) -> None:
        self.held = 0
        self.ahead_of_other: list[int] = []

    async def create_namespaced_job(self, namespace: str, manifest: Any, **_: Any) -> Any:
        if namespace.startswith("busy"):
            self.held += 1
            try:
                for _ in range(20):
                    await asyncio.sleep(0)
            finally:
                self.held -= 1
        else:
            self.ahead_of_other.append(self.held)
        return FakeResponse(201, b'{"metadata": {"name": "%s"}}' % manifest["name"].encode())


async def test_another_tenant_s_create_shares_the_api_server_with_few_writes_of_many_tenants():
    """Seven busy tenants (the onset of issue 45's attacks: each hostile namespace's first
    passes) each have their own 8 writes in flight; another tenant's create then reached an
    API server holding 56 of theirs, and was answered when most of them were."""
    server = SharedServer()
    cluster = Cluster(object(), limiter=TokenBucket(qps=1000, burst=1000))  # type: ignore[arg-type]
    cluster._batch = server
    burst = [
        asyncio.create_task(
            cluster.create_job({"metadata": {"namespace": f"busy-{t}"}, "name": f"b{t}-{i}"})
        )
        for t in range(7)
        for i in range(30)
    ]
    for _ in range(5):
        await asyncio.sleep(0)
    created = await cluster.create_job({"metadata": {"namespace": "other"}, "name": "runner-1"})
    names = await asyncio.gather(*burst)
    assert created == "runner-1"
    assert len(set(names)) == 7 * 30  # the busy tenants' writes all went through, in turn
    assert server.ahead_of_other[0] <= 16  # before: 56
