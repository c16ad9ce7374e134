"""A tenant with many groups polling at once must not put all its Gitea answers ahead of
another tenant's (issue 45): every answer is read and parsed on the one event loop, in the
order the answers became ready. Real loopback servers and the real client, so the requests
and their answers are what the operator sends and reads."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from gitea_runner_operator.api.forge import Flavor, ForgeInfo
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.forge.client import GiteaClient, SessionPool
from gitea_runner_operator.forge.observe import REQUESTS_PER_NAMESPACE, ScopeFetcher
from gitea_runner_operator.forge.scope import ScopeRef
from tests.support.fake_gitea import SimulatedGitea
from tests.support.local_http import LocalServers

GROUPS = 40  # one tenant's groups, each on an org of its own
GITEA = ForgeInfo(Flavor.GITEA)


class CountingGitea:
    """A Gitea (fake_gitea's answers) that counts the requests in flight and answered, per
    token."""

    def __init__(self) -> None:
        self.gitea = SimulatedGitea()
        self.in_flight: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.answered: dict[str, int] = {}

    async def handle(self, request: web.Request) -> web.Response:
        token = request.headers.get("Authorization", "")
        self.in_flight[token] = self.in_flight.get(token, 0) + 1
        self.most[token] = max(self.most.get(token, 0), self.in_flight[token])
        try:
            await asyncio.sleep(0.001)  # the answers of the requests sent meanwhile pile up
            status, body = self.gitea.route(request.method, request.path_qs)
            return web.json_response(body, status=status)
        finally:
            self.in_flight[token] -= 1
            self.answered[token] = self.answered.get(token, 0) + 1


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[CountingGitea], Awaitable[str]]]:
    servers = LocalServers()

    async def start(fake: CountingGitea) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", fake.handle)
        return await servers.start(app)

    yield start
    await servers.close()


async def test_another_tenant_s_poll_is_answered_after_a_few_of_a_busy_tenant_s_answers(serve):
    busy, other = CountingGitea(), CountingGitea()
    busy_url, other_url = await serve(busy), await serve(other)
    pool = SessionPool()
    fetcher = ScopeFetcher(deadline=30, budget=(1 << 24, 25_000))
    try:
        evil = GiteaClient(pool.session_for(busy_url), busy_url, "evil-token")
        good = GiteaClient(pool.session_for(other_url), other_url, "good-token")
        polls = [
            asyncio.create_task(
                fetcher.fetch(evil, ScopeRef(Scope.ORG, org=f"o{i}"), "evil", GITEA, "evil")
            )
            for i in range(GROUPS)
        ]
        await asyncio.sleep(0)  # the busy tenant's polls are under way first
        fetched = await fetcher.fetch(good, ScopeRef(Scope.ORG, org="app"), "good", GITEA, "good")
        ahead = busy.answered.get("token evil-token", 0)
        await asyncio.gather(*polls)
    finally:
        await pool.close()
    assert fetched.problem is None and fetched.observation is not None
    # Each of the other tenant's requests waited behind at most a few of the busy tenant's
    # answers, not behind one per busy group (before: 40 requests in flight at once, and
    # the other tenant's poll finished after 187 of the busy tenant's answers).
    assert busy.most["token evil-token"] <= REQUESTS_PER_NAMESPACE
    assert ahead <= 6 * REQUESTS_PER_NAMESPACE
    assert all(p.result().problem is None for p in polls)  # the busy tenant is served too
