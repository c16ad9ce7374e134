"""The Gitea Actions API: scopes, jobs, runners, paging, on the transport of
:mod:`.http` (retries, Retry-After, caps, status -> error).

Pagination follows ``total_count`` (the server clamps ``limit`` silently) with a hard page
cap, so a huge queue cannot stall a poll; each page is checked against the page size and an
observation against its item budget (``forge/limits.py``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gitea_runner_operator.api.gitea import (
    ActionJob,
    ActionRunner,
    JobList,
    Listing,
    OwnerKind,
    RunnerList,
)
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.api.scope import fold
from gitea_runner_operator.forge.errors import (
    GiteaError,
    GiteaNotFound,
    GiteaProtocolError,
    GiteaUnsupported,
)
from gitea_runner_operator.forge.http import GiteaTransport, parse_retry_after
from gitea_runner_operator.forge.limits import check_page
from gitea_runner_operator.forge.scope import ScopeRef
from gitea_runner_operator.forge.sessions import SessionPool
from gitea_runner_operator.forge.unserved import UnservedTally

__all__ = ["GiteaClient", "SessionPool", "parse_retry_after"]

M = TypeVar("M", bound=BaseModel)


class GiteaClient(GiteaTransport):
    """The Actions API of one Gitea instance with one token."""

    async def resolve_scope(self, scope: ScopeRef) -> ScopeRef:
        """Check that the scope's target exists and, for ``org`` scope, whether it is an
        organisation or the token's own user (whose lists live under ``/user``)."""
        if scope.scope is Scope.GLOBAL:
            return scope
        if scope.scope is Scope.REPO:
            try:
                await self.call("GET", f"/api/v1/repos/{scope.prefix.split('/repos/', 1)[1]}")
            except GiteaNotFound:
                raise GiteaNotFound(
                    f"repository {scope.org}/{scope.repo} not found, "
                    "or not visible to the auth token"
                ) from None
            return scope
        try:
            await self.call("GET", f"/api/v1/orgs/{scope.prefix.rsplit('/', 1)[1]}")
            return ScopeRef(scope.scope, scope.org, scope.repo, OwnerKind.ORG)
        except GiteaNotFound:
            me = await self.call("GET", "/api/v1/user")
            login = me.get("login") if isinstance(me, dict) else None
            if isinstance(login, str) and scope.org and fold(login) == fold(scope.org):
                return ScopeRef(scope.scope, scope.org, scope.repo, OwnerKind.USER)
            raise GiteaNotFound(
                f"organisation {scope.org} not found, and it is not the auth token's own user"
            ) from None

    async def list_jobs(
        self,
        scope: ScopeRef,
        status: str = "queued",
        max_pages: int | None = None,
        *,
        newest_first: bool = False,
        offered: Collection[str] | None = None,
    ) -> Listing[ActionJob]:
        """Jobs of the scope in one API status (``queued`` is the only runnable demand).
        ``newest_first`` asks for descending ids (Gitea >= 1.27; older releases ignore it and
        answer oldest first, which the caller must check). With ``offered`` (every label
        the Gitea's groups offer), queued jobs none of them could run are only counted
        (forge/unserved.py)."""
        query = {"status": status}
        if newest_first:
            query |= {"sort": "id", "order": "desc"}
        try:
            return await self._paginate(
                scope.jobs_path,
                query,
                JobList,
                "jobs",
                ActionJob,
                max_pages=max_pages,
                tally=UnservedTally(offered) if offered is not None else None,
            )
        except GiteaNotFound:
            raise GiteaUnsupported(
                f"{scope.jobs_path} is missing: listing Actions jobs needs Gitea >= 1.25"
            ) from None

    async def list_runners(self, scope: ScopeRef) -> Listing[ActionRunner]:
        try:
            return await self._paginate(scope.runners_path, {}, RunnerList, "runners", ActionRunner)
        except GiteaNotFound:
            raise GiteaUnsupported(
                f"{scope.runners_path} is missing: the runners API needs Gitea >= 1.24"
            ) from None

    async def get_runner(self, scope: ScopeRef, runner_id: int) -> ActionRunner | None:
        """One registration as it is now; None when it is gone."""
        try:
            body = await self.call("GET", f"{scope.runners_path}/{runner_id}")
        except GiteaNotFound:
            return None
        return self._runner(body, runner_id)

    async def set_runner_disabled(
        self, scope: ScopeRef, runner_id: int, disabled: bool
    ) -> ActionRunner | None:
        """Disable (or re-enable) a registration so that it takes no new task (Gitea >= 1.26).
        Returns the runner as it is after the change, or None when this Gitea cannot disable
        runners or the runner is gone (callers then rely on a fresh read)."""
        try:
            body = await self.call(
                "PATCH", f"{scope.runners_path}/{runner_id}", json_body={"disabled": disabled}
            )
        except GiteaNotFound:
            return None
        except GiteaError as exc:
            if type(exc) is GiteaError:  # 405/422 and the like: a Gitea without the feature
                return None
            raise
        return self._runner(body, runner_id)

    @staticmethod
    def _runner(body: Any, runner_id: int) -> ActionRunner:
        try:
            return ActionRunner.model_validate(body)
        except ValidationError:
            raise GiteaProtocolError(f"runner {runner_id}: unexpected response shape") from None

    async def delete_runner(self, scope: ScopeRef, runner_id: int) -> bool:
        """Remove a runner registration; False when it was already gone."""
        try:
            await self.call("DELETE", f"{scope.runners_path}/{runner_id}")
        except GiteaNotFound:
            return False
        return True

    async def _paginate(
        self,
        path: str,
        params: Mapping[str, str],
        model: type[M],
        key: str,
        entry: type[BaseModel],
        max_pages: int | None = None,
        tally: UnservedTally | None = None,
    ) -> Listing[Any]:
        """Every item of ``key`` over the pages; each page is checked against the page size
        and charged to the observation's budget before it is validated, and each item
        against its caps (one past a cap is refused, its page kept)."""
        seen: dict[int, Any] = {}
        refused = 0
        for page in range(1, (max_pages or self.max_pages) + 1):
            body = await self.call(
                "GET", path, {**params, "page": str(page), "limit": str(self.page_size)}
            )
            raw = body.get(key) if isinstance(body, dict) else None
            listed = len(raw) if isinstance(raw, list) else 0
            before = self.refused
            items: list[Any]
            try:
                if isinstance(raw, list):
                    check_page(listed, self.page_size, f"GET {path} page {page}")
                    self._spend_items(listed, f"GET {path}")
                    if tally is not None:  # jobs no group could run: counted, no model
                        raw = [item for item in raw if tally.screen(item)]
                    items = list(self._within_caps(entry, raw, f"GET {path}"))
                    if tally is not None:
                        items = [item for item in items if tally.keeps(item)]
                    parsed = model.model_validate({**body, key: None})
                else:
                    parsed = model.model_validate(body)
                    items = getattr(parsed, key) or []
            except ValidationError as exc:
                raise GiteaProtocolError(
                    f"{path}: unexpected response shape ({exc.error_count()} errors)"
                ) from None
            refused += self.refused - before
            for item in items:  # order is unspecified, so pages may overlap while jobs move
                seen[item.id] = item
            total = int(getattr(parsed, "total_count", 0))
            dropped = tally.dropped if tally is not None else 0
            if not listed or len(seen) + refused + dropped >= total:
                return _listing(seen, True, tally)
        return _listing(seen, False, tally)


def _listing(seen: dict[int, Any], complete: bool, tally: UnservedTally | None) -> Listing[Any]:
    unserved, other = tally.result() if tally is not None else ((), 0)
    return Listing(tuple(seen.values()), complete, unserved, other)
