"""Asks Gitea (and the Secrets it needs for that) what a group's demand is right now.

One observation = read the auth token Secret, check the registration token Secret, list the
scope's runners, then its queued jobs. Runners are read *before* jobs on purpose: a job that
a runner takes between the two reads then drops out of demand instead of being counted
twice (as queued and as covered by an idle runner), so the error is always on the side of
not starting a runner.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.forge.client import GiteaClient, SessionPool
from gitea_runner_operator.forge.errors import GiteaError, GiteaRateLimited
from gitea_runner_operator.forge.scope import ScopeRef
from gitea_runner_operator.kube.cluster import Cluster, SecretProblem
from gitea_runner_operator.reconcile.scaling import Observation
from gitea_runner_operator.reconcile.status import Problem

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One observation, or the problem that prevented it."""

    started_at: float  # monotonic: compared with the cache's change clock
    checked_at: str  # wall clock, for status.lastCheckTime
    observation: Observation | None = None
    problem: Problem | None = None
    retry_after: float | None = None
    client: GiteaClient | None = None
    scope: ScopeRef | None = None


def utc_now_iso() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


class Observer:
    def __init__(
        self,
        cluster: Cluster,
        sessions: SessionPool,
        *,
        clock: Callable[[], float] = time.monotonic,
        page_size: int = 50,
        max_pages: int = 20,
    ) -> None:
        self._cluster = cluster
        self._sessions = sessions
        self._clock = clock
        self._page_size = page_size
        self._max_pages = max_pages
        self._resolved: dict[tuple[str, ScopeRef], ScopeRef] = {}

    async def observe(self, namespace: str, spec: RunnerGroupSpec) -> Snapshot:
        started, checked = self._clock(), utc_now_iso()
        try:
            auth = spec.auth_token.secret_ref
            token = await self._cluster.read_secret_key(
                namespace, auth.name, auth.key, "spec.authToken"
            )
            reg = spec.registration_token.secret_ref
            await self._cluster.read_secret_key(
                namespace, reg.name, reg.key, "spec.registrationToken"
            )
        except SecretProblem as exc:
            return Snapshot(started, checked, problem=exc.problem)

        client = GiteaClient(
            self._sessions.session_for(spec.gitea.url),
            spec.gitea.url,
            token,
            page_size=self._page_size,
            max_pages=self._max_pages,
        )
        wanted = ScopeRef.from_spec(spec)
        cache_key = (spec.gitea.url, wanted)
        try:
            scope = self._resolved.get(cache_key)
            if scope is None:
                scope = await client.resolve_scope(wanted)
                self._resolved[cache_key] = scope
            runners = await client.list_runners(scope)
            queued = await client.list_jobs(scope, "queued")
        except GiteaError as exc:
            self._resolved.pop(cache_key, None)  # the target may have been renamed or created
            retry_after = exc.retry_after if isinstance(exc, GiteaRateLimited) else None
            problem = Problem(exc.reason, f"{spec.gitea.url}: {exc}")
            return Snapshot(started, checked, problem=problem, retry_after=retry_after)
        if not queued.complete:
            log.warning(
                "queued job list truncated at the page cap; demand is at least what was seen",
                gitea=spec.gitea.url,
                seen=len(queued.items),
            )
        observation = Observation(
            queued=queued.items, runners=runners.items, runners_complete=runners.complete
        )
        return Snapshot(started, checked, observation=observation, client=client, scope=scope)
