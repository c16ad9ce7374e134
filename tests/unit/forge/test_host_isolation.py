"""A tenant's Gitea that accepts requests and never answers must cost that tenant only: with
more hung requests to it than one session's connection limit, another Gitea's request still
gets its answer (issue 24). Real loopback servers, so the real aiohttp connectors are used."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from gitea_runner_operator.forge.client import GiteaClient, SessionPool
from tests.support.local_http import LocalServers

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
HUNG = 60  # more than one session's connection limit (SessionPool: 50)


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    servers = LocalServers()

    async def start(handler: Handler) -> str:
        app = web.Application()
        app.router.add_get("/api/v1/version", handler)
        return await servers.start(app)

    yield start
    await servers.close()


async def test_a_hung_gitea_does_not_delay_another_gitea(serve):
    release, all_held = asyncio.Event(), asyncio.Event()
    arrived = 0

    async def hang(request: web.Request) -> web.Response:
        nonlocal arrived
        arrived += 1
        if arrived == 50:  # every connection the hostile session may open is held
            all_held.set()
        await release.wait()
        return web.json_response({"version": "1.24.0"})

    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"version": "1.24.0"})

    hostile, healthy = await serve(hang), await serve(answer)
    pool = SessionPool()
    try:
        # The hostile requests wait for as long as it takes: none frees its connection.
        forever = aiohttp.ClientTimeout(total=None)
        evil = GiteaClient(pool.session_for(hostile), hostile, "evil-token", timeout=forever)
        hung = [asyncio.create_task(evil.call("GET", "/api/v1/version")) for _ in range(HUNG)]
        await all_held.wait()
        # One attempt within the default deadlines: waiting for a connection the hostile
        # requests hold would end in GiteaUnreachable.
        good = GiteaClient(pool.session_for(healthy), healthy, "good-token", attempts=1)
        answer_of_healthy = await good.call("GET", "/api/v1/version")
        assert answer_of_healthy == {"version": "1.24.0"}
        assert not any(task.done() for task in hung)  # the hostile requests still hang
    finally:
        release.set()
        for task in hung:
            task.cancel()
        await asyncio.gather(*hung, return_exceptions=True)
        await pool.close()
