"""--sharding: a fenced write cannot leave after the right to write lapsed, even when the
network makes it wait (issue 46). The fence used to be checked only before the request was
handed to the HTTP client: a DELETE that then waited for a connection reached Gitea 3.4 s
after the right lapsed. Now every fenced write, Gitea's and the API server's, is cut when
the right runs out, connection wait included."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gitea_runner_operator.forge.client import GiteaClient
from gitea_runner_operator.kit import fence
from gitea_runner_operator.kube.http import write
from gitea_runner_operator.kube.ratelimit import TokenBucket
from tests.support.api_response import FakeResponse

WAIT = 0.6  # the connection's wait
RIGHT_FOR = 0.2  # the right lapses this long after the write is handed over


class SlowConnector(aiohttp.TCPConnector):
    """A pool whose connections come only after a wait (a full pool, a slow connect)."""

    async def connect(self, req: Any, traces: Any, timeout: Any) -> Any:  # noqa: ASYNC109 - aiohttp's signature
        await asyncio.sleep(WAIT)
        return await super().connect(req, traces, timeout)


def right_until(deadline: float) -> tuple[fence.Right, fence.Left]:
    return (lambda: time.monotonic() < deadline), (lambda: deadline - time.monotonic())


async def test_a_gitea_write_waiting_for_a_connection_never_leaves_after_the_right_lapsed():
    arrived: list[float] = []

    async def delete(request: web.Request) -> web.Response:
        arrived.append(time.monotonic())
        return web.Response(status=204)

    app = web.Application()
    app.router.add_delete("/api/v1/repos/acme/widgets/actions/runners/7", delete)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    session = aiohttp.ClientSession(connector=SlowConnector())
    try:
        gitea = GiteaClient(session, base, "token", attempts=1)
        deadline = time.monotonic() + RIGHT_FOR
        with pytest.raises(fence.Fenced), fence.fenced_by(*right_until(deadline)):
            await gitea.call("DELETE", "/api/v1/repos/acme/widgets/actions/runners/7")
        await asyncio.sleep(WAIT)  # had it gone on, it would have arrived by now
        assert arrived == []
        # With time left, the same write goes.
        with fence.fenced_by(*right_until(time.monotonic() + 5)):
            await gitea.call("DELETE", "/api/v1/repos/acme/widgets/actions/runners/7")
        assert len(arrived) == 1
    finally:
        await session.close()
        await runner.cleanup()


async def test_a_write_whose_right_is_renewed_while_it_waits_goes():
    """The bound is asked again when it runs out: a renewal meanwhile (the replica's Lease,
    every 2 s) lets a slow write go on."""
    sent: list[float] = []
    until = [time.monotonic() + RIGHT_FOR]

    async def request() -> FakeResponse:
        await asyncio.sleep(WAIT)
        sent.append(time.monotonic())
        return FakeResponse(200)

    async def renew() -> None:
        await asyncio.sleep(RIGHT_FOR / 2)
        until[0] = time.monotonic() + 5

    right = (lambda: time.monotonic() < until[0]), (lambda: until[0] - time.monotonic())
    renewing = asyncio.create_task(renew())
    with fence.fenced_by(*right):
        await write(TokenBucket(qps=100, burst=100), "team-a", request)
    await renewing
    assert len(sent) == 1


async def test_an_api_server_write_waiting_for_a_connection_never_leaves_after_the_lapse():
    sent: list[float] = []

    async def request() -> FakeResponse:
        await asyncio.sleep(WAIT)  # waits for a pooled connection
        sent.append(time.monotonic())  # ... and only then leaves
        return FakeResponse(200)

    deadline = time.monotonic() + RIGHT_FOR
    with pytest.raises(fence.Fenced), fence.fenced_by(*right_until(deadline)):
        await write(TokenBucket(qps=100, burst=100), "team-a", request)
    assert sent == []


async def test_a_replicas_pass_cannot_write_after_its_renew_deadline_while_a_write_waits():
    """The same through a replica's worker: its pass holds the group's right, the API
    server write waits for a connection past the replica's renew deadline, and must not
    leave then (the others may count this replica's Lease as lapsed)."""
    from kubernetes_asyncio import client

    from gitea_runner_operator.reconcile.reconciler import Result
    from gitea_runner_operator.runtime.controller import Controller
    from gitea_runner_operator.settings import Settings
    from gitea_runner_operator.sharding.leases.membership import MembershipLeases
    from tests.support.builders import spec_with
    from tests.support.leases import Clock, FakeLeases, without_runner_objects

    sent: list[float] = []
    passes: list[str] = []

    async def request() -> FakeResponse:
        await asyncio.sleep(WAIT)
        sent.append(time.monotonic())
        return FakeResponse(200)

    async def reconcile(key: str) -> Result:
        passes.append(key)
        await write(TokenBucket(qps=100, burst=100), "team", request)
        return Result()

    async with client.ApiClient() as api:
        membership = MembershipLeases(api, "ops", "gro", "a", clock=Clock(), leases=FakeLeases())
        controller = Controller(api, Settings(sharding=True), membership=membership)
        without_runner_objects(controller.cache)
        assert controller.share is not None
        controller.share.round.tenure.settle_reads = 0
        controller.share.round._deadline = RIGHT_FOR  # the renew deadline, short for the test
        obj = {"metadata": {"namespace": "team", "name": "app"}, "spec": spec_with()}
        controller.cache.groups[0].cache["team/app"] = obj
        controller.reconciler.reconcile = reconcile  # type: ignore[method-assign]
        worker = asyncio.create_task(controller.workers.work())
        try:
            await controller.share.round.round()
            await controller.share.round.round()  # takes the group: the worker's pass starts
            await asyncio.sleep(WAIT + 0.2)
            assert passes == ["team/app"]
            assert sent == []
        finally:
            controller.queue.shut_down()
            await worker
