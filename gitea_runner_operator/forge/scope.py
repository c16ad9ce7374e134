"""Where, in Gitea's API, a RunnerGroup's jobs and runners live."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from gitea_runner_operator.api.gitea import OwnerKind
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec, Scope


@dataclass(frozen=True, slots=True)
class ScopeRef:
    """A resolved scope. ``owner_kind`` matters only for ``org`` scope, where the owner may be
    a user, whose jobs live under ``/user`` (the token's own account) instead of ``/orgs``."""

    scope: Scope
    org: str | None = None
    repo: str | None = None
    owner_kind: OwnerKind = OwnerKind.ORG

    @classmethod
    def from_spec(cls, spec: RunnerGroupSpec) -> ScopeRef:
        return cls(scope=spec.scope, org=spec.org, repo=spec.repo)

    @property
    def prefix(self) -> str:
        """The API path under which ``/actions/jobs`` and ``/actions/runners`` sit."""
        if self.scope is Scope.GLOBAL:
            return "/api/v1/admin"
        org = quote(self.org or "", safe="")
        if self.scope is Scope.REPO:
            return f"/api/v1/repos/{org}/{quote(self.repo or '', safe='')}"
        if self.owner_kind is OwnerKind.USER:
            return "/api/v1/user"
        return f"/api/v1/orgs/{org}"

    @property
    def jobs_path(self) -> str:
        return f"{self.prefix}/actions/jobs"

    @property
    def runners_path(self) -> str:
        return f"{self.prefix}/actions/runners"
