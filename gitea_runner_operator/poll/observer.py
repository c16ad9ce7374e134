"""Asks Gitea (and the Secrets it needs for that) what a group's demand is right now.

One observation = check the Gitea URL against the admin's allow-list, read the auth token
Secret, check the registration token Secret, list the scope's runners, then its queued jobs
(the requests themselves are in ``forge/observe.py``). Runners are read *before* jobs on purpose: a
job that a runner takes between the two reads then drops out of demand instead of being
counted twice (as queued and as covered by an idle runner), so the error is always on the
side of not starting a runner.

An observation as a whole has a deadline, so a Gitea that accepts connections and never
answers costs its own group one late snapshot and nobody else anything; and a budget of
bytes read and items listed (``forge/limits.py``), so a Gitea that answers too much costs
its group the condition ``GiteaAnswerTooLarge`` and nobody else memory.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from gitea_runner_operator.api import template_policy
from gitea_runner_operator.api.credentials import url_problem
from gitea_runner_operator.api.observation import Problem, ProblemKind, Snapshot
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.api.template_policy import TemplatePolicy
from gitea_runner_operator.forge.client import GiteaClient, SessionPool
from gitea_runner_operator.forge.errors import (
    GiteaError,
    GiteaForbidden,
    GiteaRateLimited,
    GiteaUnauthorized,
)
from gitea_runner_operator.forge.flavor import FlavorCache, client_for, forge_problem
from gitea_runner_operator.forge.forgejo import RepoNames
from gitea_runner_operator.forge.limits import (
    OBSERVATION_MAX_BYTES,
    OBSERVATION_MAX_ITEMS,
)
from gitea_runner_operator.forge.observe import (
    REQUESTS_PER_NAMESPACE,
    Fetched,
    OfferedLabels,
    ScopeFetcher,
    Shared,
    settle,
)
from gitea_runner_operator.forge.observe import GiteaHandle as GiteaHandle  # re-exported
from gitea_runner_operator.forge.scope import ScopeRef
from gitea_runner_operator.kit.clock import utc_now_iso
from gitea_runner_operator.kit.tenant_budget import TenantBudget
from gitea_runner_operator.kit.tenant_reads import ReadShares
from gitea_runner_operator.kube.configmaps import ConfigReader, ReferenceProblem
from gitea_runner_operator.kube.secrets import SecretProblem, Secrets
from gitea_runner_operator.metrics import Metrics
from gitea_runner_operator.poll.config_check import RunnerConfigCheck
from gitea_runner_operator.poll.trust import GiteaTrust

log = structlog.get_logger(__name__)

# What no group asked for in this long goes: resolved scopes, shared answers, metric sample
# times, TLS contexts and HTTP sessions of old tokens, old CA bundles or deleted groups.
IDLE_EXPIRY = 600.0
HOUSEKEEPING_EVERY = 60.0


class Observer:
    def __init__(
        self,
        secrets: Secrets,
        sessions: SessionPool,
        *,
        trust: GiteaTrust | None = None,
        configs: ConfigReader | None = None,
        metrics: Metrics | None = None,
        allowed_urls: Sequence[str] = (),
        deadline: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        page_size: int = 50,
        max_pages: int = 200,
        template_policy: TemplatePolicy | None = None,
        max_answer_bytes: int = OBSERVATION_MAX_BYTES,
        max_answer_items: int = OBSERVATION_MAX_ITEMS,
        tenant_budget: TenantBudget | None = None,
        offered: OfferedLabels | None = None,
        requests_per_namespace: int = REQUESTS_PER_NAMESPACE,
        reads: ReadShares | None = None,
    ) -> None:
        self._template_policy = template_policy
        self._budget = (max_answer_bytes, max_answer_items)
        self._secrets = secrets
        self._sessions = sessions
        self._trust = trust
        self._runner_configs = RunnerConfigCheck(configs) if configs is not None else None
        self._metrics = metrics
        self._allowed = tuple(allowed_urls)
        self._deadline = deadline
        self._clock = clock
        self._page_size = page_size
        self._max_pages = max_pages
        # Resolved scopes and sample times, keyed by the token's fingerprint too: what one
        # tenant's token may see must never answer for another token.
        # ``offered``: every label a Gitea URL's groups offer (the ledger's, through the
        # runtime): the queued jobs none of them could run are only counted.
        self._fetcher = ScopeFetcher(
            deadline=deadline,
            budget=self._budget,
            clock=clock,
            tenants=tenant_budget,
            offered=offered,
            requests_per_namespace=requests_per_namespace,
            reads=reads,
        )
        # (URL, scope, token fingerprint, CA bundle id) -> the latest request for it.
        self._shared: dict[tuple[str, ScopeRef, str, str], Shared] = {}
        # Last use of each (URL, scope, token fingerprint), the key every cache above starts
        # with: what no group used for IDLE_EXPIRY goes, so memory follows what is alive.
        self._used: dict[tuple[str, ScopeRef, str], float] = {}
        self._housekept = clock()
        # Every fetch task not yet finished: cancelled and awaited when its URL goes or the
        # observer closes, never left to fail on its own.
        self._tasks: set[asyncio.Task[Fetched]] = set()
        self._flavors = FlavorCache()
        # Forgejo repository names by id, per URL and token fingerprint (forge/forgejo.py).
        self._repo_names: dict[tuple[str, str], RepoNames] = {}
        self.fetches = 0  # sets of Gitea requests actually sent, for tests and benchmarks

    def forget(self, urls_in_use: set[str]) -> list[asyncio.Task[Fetched]]:
        """Drop what was learned about URLs no group uses; returns their fetches, cancelled,
        for the caller to await (:meth:`drop` does both)."""
        for key in [k for k in self._fetcher.resolved if k[0] not in urls_in_use]:
            del self._fetcher.resolved[key]
        cancelled = []
        for shared_key in [k for k in self._shared if k[0] not in urls_in_use]:
            cancelled += self._pop_shared(shared_key)
        for used in [k for k in self._used if k[0] not in urls_in_use]:
            del self._used[used]
            self._fetcher.forget(used)
        self._flavors.forget(urls_in_use)
        for names in [k for k in self._repo_names if k[0] not in urls_in_use]:
            del self._repo_names[names]
        return cancelled

    def _pop_shared(
        self, shared_key: tuple[str, ScopeRef, str, str]
    ) -> list[asyncio.Task[Fetched]]:
        """Forget one shared request; its fetch, if still running, is cancelled and returned
        for the caller to await."""
        shared = self._shared.pop(shared_key)
        if shared.task.done():
            return []
        shared.abandoned = True
        shared.task.cancel()
        return [shared.task]

    def __len__(self) -> int:
        """Entries held in the caches (for tests and benchmarks)."""
        return len(self._fetcher.resolved) + len(self._shared) + len(self._fetcher.progress_at)

    async def housekeep(self) -> None:
        """Drop what no group used for IDLE_EXPIRY; close sessions of old trust and tokens,
        after the fetches dropped with them have ended."""
        now = self._clock()
        self._housekept = now
        idle = [k for k, at in self._used.items() if now - at > IDLE_EXPIRY]
        for k in idle:
            del self._used[k]
            self._fetcher.resolved.pop(k, None)
            self._fetcher.forget(k)
        gone = set(idle)
        cancelled = []
        for shared_key, entry in list(self._shared.items()):
            if shared_key[:3] in gone or (entry.task.done() and now - entry.started > IDLE_EXPIRY):
                cancelled += self._pop_shared(shared_key)
        await settle(cancelled)
        if self._trust is not None:
            self._trust.expire(IDLE_EXPIRY)
        await self._sessions.expire(IDLE_EXPIRY)

    async def drop(self, urls_in_use: set[str]) -> None:
        """:meth:`forget`, then wait until the cancelled fetches have ended (bounded), so
        that closing their sessions afterwards cannot break a request in flight."""
        await settle(self.forget(urls_in_use))

    async def close(self) -> None:
        """Cancel and await every fetch still running (shutdown, lost leadership)."""
        self._shared.clear()
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        await settle(tasks)

    async def observe(
        self,
        namespace: str,
        spec: RunnerGroupSpec,
        newer_than: float = float("-inf"),
        runners_since: float | None = None,
    ) -> tuple[Snapshot, GiteaHandle | None]:
        """A snapshot for the group, from a request that started after ``newer_than``
        (monotonic): groups that watch the same scope of the same Gitea with the same token
        share one in-flight or recent-enough request instead of each sending their own.
        ``runners_since``: a runner list asked after it will do (nothing can have changed
        it since); None: one as new as the request."""
        started, checked = self._clock(), utc_now_iso()
        if started - self._housekept > HOUSEKEEPING_EVERY:
            await self.housekeep()
        if (problem := url_problem(spec.gitea.url, self._allowed)) is not None:
            return Snapshot(started, checked, problem=problem), None
        try:
            async with asyncio.timeout(self._deadline):
                return await self._observe(
                    namespace, spec, started, checked, newer_than, runners_since
                )
        except TimeoutError:
            problem = Problem(
                "GiteaUnreachable",
                f"{spec.gitea.url}: no complete answer within {self._deadline:.0f}s",
            )
            return Snapshot(started, checked, problem=problem), None

    async def observe_with(
        self, spec: RunnerGroupSpec, handle: GiteaHandle, namespace: str
    ) -> tuple[Snapshot, GiteaHandle | None]:
        """A snapshot asked with the handle of an earlier good answer, reading no Secret.
        Only for a deleting group whose credentials are gone (GroupPoller): a namespace
        deleted whole takes the tokens Secret and the RoleBinding lending it in the same
        breath as the group, and its runners' registrations must still leave Gitea. Never
        shared with other groups: the token may be one nobody lends any more. Its requests
        and answers count against its own namespace's share (``namespace``), as its polls
        did: a namespace deleted whole must not take the places of every other one."""
        started, checked = self._clock(), utc_now_iso()
        if handle.forge is None or (problem := url_problem(spec.gitea.url, self._allowed)):
            problem = problem or Problem("GiteaError", "no earlier answer to ask again with")
            return Snapshot(started, checked, problem=problem), None
        wanted = ScopeRef.from_spec(spec)
        fetched = await self._fetcher.fetch(
            handle.client, wanted, handle.fingerprint, handle.forge, namespace
        )
        snapshot = Snapshot(
            started,
            checked,
            observation=fetched.observation,
            problem=fetched.problem,
            retry_after=fetched.retry_after,
        )
        return snapshot, fetched.handle

    async def _observe(
        self,
        namespace: str,
        spec: RunnerGroupSpec,
        started: float,
        checked: str,
        newer_than: float,
        runners_since: float | None,
    ) -> tuple[Snapshot, GiteaHandle | None]:
        if (tenants := self._fetcher.kept.budget) is not None:
            tenants.note(namespace)  # a tenant that polls: the budget's shares count it
        url = spec.gitea.url
        auth = spec.auth_token.secret_ref
        reg = spec.registration_token.secret_ref if spec.registration_token else None
        try:
            token = await self._secrets.read(namespace, auth.name, auth.key, "spec.authToken", url)
            # Checked, never used here: runner Pods get it by secretKeyRef, and must not be
            # pointed at a Secret that did not opt in. (Forgejo groups may have none.)
            if reg is not None:
                await self._secrets.read(
                    namespace, reg.name, reg.key, "spec.registrationToken", url
                )
            policy = self._template_policy
            if policy is not None and not policy.allows("unlabelledSecrets"):
                # Past the bound the reconciler refuses the template (too_many_secrets).
                refs = template_policy.secrets_to_check(spec.template)
                for ref in refs[: template_policy.MAX_TEMPLATE_SECRETS]:
                    await self._secrets.require_opt_in(namespace, ref.name, ref.path)
        except SecretProblem as exc:
            return Snapshot(started, checked, problem=exc.problem), None
        except Exception as exc:  # API server trouble reading the Secret
            log.warning("could not read a Secret", namespace=namespace, error=repr(exc))
            problem = Problem(
                "SecretReadFailed",
                f"reading Secret {namespace}/{auth.name} failed; retrying",
                ProblemKind.CLUSTER,
            )
            return Snapshot(started, checked, problem=problem), None

        try:
            tls, trust_id = (
                await self._trust.context_for(namespace, spec.gitea)
                if self._trust is not None
                else (None, "")
            )
            if self._runner_configs is not None:
                await self._runner_configs.require_usable(namespace, spec)
        except ReferenceProblem as exc:
            problem = Problem(exc.problem.reason, exc.problem.message, ProblemKind.SECRET)
            return Snapshot(started, checked, problem=problem), None
        options: dict[str, Any] = {
            "page_size": self._page_size,
            "max_pages": self._max_pages,
            "on_request": self._metrics.observe_gitea if self._metrics else None,
            "on_rate_limit_wait": self._metrics.gitea_rate_limit_wait if self._metrics else None,
        }
        session = self._sessions.session_for(url, tls, trust_id)
        fingerprint = hashlib.sha256(token.encode()).hexdigest()
        try:
            forge = await self._flavors.info(
                GiteaClient(session, url, token, **options),
                spec.gitea.flavor,
                (url, fingerprint, trust_id),
            )
        except GiteaError as exc:
            problem = Problem(exc.reason, f"{url}: {exc}" if url not in str(exc) else str(exc))
            retry_after = exc.retry_after if isinstance(exc, GiteaRateLimited) else None
            return Snapshot(started, checked, problem=problem, retry_after=retry_after), None
        if (bad := forge_problem(forge, has_registration_token=reg is not None)) is not None:
            return Snapshot(started, checked, problem=bad), None
        if forge.is_forgejo:
            options["repo_names"] = self._repo_names.setdefault((url, fingerprint), RepoNames())
        client = client_for(forge.flavor, session, url, token, **options)
        wanted = ScopeRef.from_spec(spec)
        key = (url, wanted, fingerprint, trust_id + "|" + forge.flavor.value)
        self._used[key[:3]] = started
        shared = self._shared.get(key)
        runners_after = newer_than if runners_since is None else runners_since
        if (
            shared is None
            or shared.started < newer_than
            or shared.abandoned
            or shared.runners_at < runners_after
        ):
            kept_at = self._fetcher.runners_listed_at(key[:3])
            fresh = forge.is_forgejo or kept_at == float("-inf") or kept_at < runners_after
            fetch = self._fetcher.fetch(
                client,
                wanted,
                fingerprint,
                forge,
                namespace,
                own=spec.label_names,
                list_runners=fresh,
            )
            task = asyncio.create_task(fetch)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            runners_at = started if fresh else kept_at
            shared = self._shared[key] = Shared(started, checked, task, runners_at=runners_at)
            self.fetches += 1
        # Shielded: one group giving up (its deadline, its poller stopping) must not cancel
        # the request the other groups are waiting for; the last one to give up does.
        shared.waiters += 1
        try:
            fetched = await asyncio.shield(shared.task)
        finally:
            shared.waiters -= 1
            if shared.waiters == 0 and not shared.task.done():
                shared.abandoned = True
                shared.task.cancel()
        if isinstance(fetched.error, GiteaUnauthorized | GiteaForbidden):
            self._secrets.invalidate(namespace, auth.name)  # rotated? read it again next time
        snapshot = Snapshot(
            shared.started,
            shared.checked,
            observation=fetched.observation,
            problem=fetched.problem,
            retry_after=fetched.retry_after,
        )
        return snapshot, fetched.handle
