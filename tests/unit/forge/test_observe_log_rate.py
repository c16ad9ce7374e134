"""What a tenant's Gitea can make the shared log say: a failure on every poll of a scope is
one line per Gitea per minute, and the next line says how many were held back."""

from __future__ import annotations

from typing import Any

from structlog.testing import capture_logs

from gitea_runner_operator.api.forge import Flavor, ForgeInfo
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.forge.observe import ScopeFetcher
from gitea_runner_operator.forge.scope import ScopeRef


class BrokenGitea:
    """A client whose every request fails in a way the client does not classify."""

    base_url = "https://gitea.tenant.test"

    def metered(self, budget: Any, turns: Any = None, tenant: str = "") -> BrokenGitea:
        return self

    async def resolve_scope(self, wanted: Any) -> Any:
        raise ValueError("an answer no parser expected")


async def test_a_gitea_that_fails_every_poll_costs_one_line_a_minute() -> None:
    now = [0.0]
    fetcher = ScopeFetcher(deadline=5, budget=(1 << 20, 1000), clock=lambda: now[0])
    scope = ScopeRef(Scope.ORG, org="acme")
    gitea = ForgeInfo(Flavor.GITEA)
    with capture_logs() as logs:
        for poll in range(100):
            now[0] = poll * 0.5
            fetched = await fetcher.fetch(BrokenGitea(), scope, "token", gitea)  # type: ignore[arg-type]
            assert fetched.problem is not None  # every poll still reports it on the group
        now[0] = 61.0
        await fetcher.fetch(BrokenGitea(), scope, "token", gitea)  # type: ignore[arg-type]
    lines = [e for e in logs if e["event"] == "gitea fetch failed unexpectedly"]
    assert [line["held_back"] for line in lines] == [0, 99]
