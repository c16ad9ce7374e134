"""The Gitea requests of one observation, and the types observations share them by.

The poll task's observer (poll/observer.py) decides *whether* to ask (allow-list, Secrets,
trust, shared answers); this module *asks*, beside the client it calls: resolve the scope
(cached), list the runners, then the queued jobs (runners first: see poll/observer.py),
and at most once a minute, alongside the jobs, a sample of running and finished jobs for
the latency metrics (only while the scope lists runners). Every answer is metered
(``forge/limits.py``) and bounded by the observation's deadline.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import structlog

from gitea_runner_operator.api.forge import ForgeInfo
from gitea_runner_operator.api.gitea import ActionJob, ActionRunner, Listing
from gitea_runner_operator.api.observation import Observation, Problem
from gitea_runner_operator.forge.budget import KeptAnswers
from gitea_runner_operator.forge.client import GiteaClient
from gitea_runner_operator.forge.errors import (
    GiteaError,
    GiteaNotFound,
    GiteaRateLimited,
    GiteaTenantBudget,
)
from gitea_runner_operator.forge.forgejo import ForgejoClient
from gitea_runner_operator.forge.limits import AnswerBudget
from gitea_runner_operator.forge.scope import ScopeRef
from gitea_runner_operator.kit.fair_gate import FairGate
from gitea_runner_operator.kit.lograte import LogRate
from gitea_runner_operator.kit.tenant_budget import TenantBudget
from gitea_runner_operator.kit.tenant_reads import ReadShares

log = structlog.get_logger(__name__)

# A warning a Gitea causes on every poll reaches the shared log at most once per this many
# seconds per Gitea; the group's condition says it on every poll.
LOG_EVERY = 60.0

PROGRESS_EVERY = 60.0
# Gitea requests of observations in flight at once per namespace (the tenant): a tenant
# with many groups, or a Gitea that answers big pages fast, puts at most this many answers
# on the event loop ahead of another tenant's (kit/fair_gate.py).
REQUESTS_PER_NAMESPACE = 4
# And in all: only a bound for the process. Low enough to bind, it would let the hung
# Gitea servers of a few namespaces hold every other namespace's requests back.
REQUESTS_AT_ONCE = 1024
# (URL, scope, token fingerprint): the key the caches of resolved scopes and samples share.
ScopeKey = tuple[str, ScopeRef, str]
# Every label the groups of a Gitea URL offer (None: not known yet, keep every job): queued
# jobs with a label outside it are only counted (forge/unserved.py).
OfferedLabels = Callable[[str], Collection[str] | None]


@dataclass(frozen=True, slots=True)
class GiteaHandle:
    """What the group's poll task needs to act in Gitea (reaping). It holds the token, so it
    stays inside the poll task: never in a snapshot, a log line or the status."""

    client: GiteaClient  # a ForgejoClient when the forge is Forgejo
    scope: ScopeRef
    # What observing again with this handle needs (Observer.observe_with): the token's
    # fingerprint (the caches' key) and the forge it answered as.
    fingerprint: str = ""
    forge: ForgeInfo | None = None

    @property
    def forgejo(self) -> ForgejoClient | None:
        return self.client if isinstance(self.client, ForgejoClient) else None


@dataclass(frozen=True, slots=True)
class Fetched:
    """The answer to one (possibly shared) set of Gitea requests."""

    observation: Observation | None = None
    problem: Problem | None = None
    retry_after: float | None = None
    error: GiteaError | None = None
    handle: GiteaHandle | None = None


@dataclass(slots=True)
class Shared:
    """One in-flight (or finished) fetch and the observations waiting for it. When the
    last waiter gives up (its deadline, its poller stopping), the fetch is cancelled: no
    abandoned request may run on, and later fail on a session closed meanwhile."""

    started: float
    checked: str
    task: asyncio.Task[Fetched]
    waiters: int = 0
    abandoned: bool = False
    # When the runner list it answers with was taken: ``started`` when it lists them, else
    # that of the scope's last list (ScopeFetcher.runner_lists), which it reuses.
    runners_at: float = float("-inf")


SETTLE_TIMEOUT = 5.0


async def settle(tasks: Sequence[asyncio.Task[Fetched]]) -> None:
    """Wait (at most ``SETTLE_TIMEOUT``) for cancelled fetches to end, retrieving their
    outcomes so that none is reported as "never retrieved"."""
    if not tasks:
        return
    await asyncio.wait(tasks, timeout=SETTLE_TIMEOUT)
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()


class ScopeFetcher:
    """Asks one scope of one Gitea; remembers resolved scopes and when each scope was last
    sampled, keyed by :data:`ScopeKey` (the observer expires them with the rest)."""

    def __init__(
        self,
        *,
        deadline: float,
        budget: tuple[int, int],
        clock: Callable[[], float] = time.monotonic,
        tenants: TenantBudget | None = None,
        offered: OfferedLabels | None = None,
        requests_per_namespace: int = REQUESTS_PER_NAMESPACE,
        reads: ReadShares | None = None,
    ) -> None:
        self._deadline = deadline
        # What each namespace's fetches read is charged to its share of the read rate.
        self._reads = reads
        # Each request of an observation holds one of its namespace's places while it is
        # sent, answered and parsed (the waits between retries hold none).
        self.turns: FairGate[str] = FairGate(REQUESTS_AT_ONCE, requests_per_namespace)
        self._offered = offered
        self._budget = budget
        # The namespaces' shares of the tenant memory budget (forge/budget.py).
        self.kept = KeptAnswers(tenants)
        self._clock = clock
        self.resolved: dict[ScopeKey, ScopeRef] = {}
        self.progress_at: dict[ScopeKey, float] = {}
        # When the scope last listed a runner: a scope with none since its last sample has
        # no job a runner of ours could have taken, so it is not sampled again.
        self.runners_at: dict[ScopeKey, float] = {}
        # The scope's last runner list and when it was asked: a poll for which nothing can
        # have changed it since (no runner Job of the group alive, started or ended) reuses
        # it instead of asking again (poll/poller.py, ``runners_since``).
        self.runner_lists: dict[ScopeKey, tuple[float, Listing[ActionRunner]]] = {}
        self.samples = 0  # for tests and benchmarks
        self._log_rate = LogRate(LOG_EVERY, clock=clock)  # per (warning, Gitea URL)

    def forget(self, key: ScopeKey) -> None:
        """Drop the sample times and kept answer of a scope no group uses any more."""
        self.progress_at.pop(key, None)
        self.runners_at.pop(key, None)
        self.kept.drop(key)
        self.runner_lists.pop(key, None)

    def runners_listed_at(self, key: ScopeKey) -> float:
        """When the scope's runner list kept for reuse was asked (-inf: none kept)."""
        kept = self.runner_lists.get(key)
        return kept[0] if kept is not None else float("-inf")

    async def fetch(
        self,
        client: GiteaClient,
        wanted: ScopeRef,
        fingerprint: str,
        forge: ForgeInfo,
        namespace: str = "",
        own: Collection[str] = (),
        *,
        list_runners: bool = True,
    ) -> Fetched:
        """``namespace``: whose share of the tenant memory budget pays for it (none: no
        charge, as for a deleting group's last ask). ``own``: the labels of the group
        asking, kept beside those its Gitea's groups offer (it may not be known as one of
        them yet). ``list_runners=False``: answer with the scope's kept runner list (Gitea
        only; a scope with none kept is listed all the same)."""
        lease = self.kept.lease(namespace)
        budget = AnswerBudget(*self._budget, tenant=lease)
        offered = self._offered(client.base_url) if self._offered is not None else None
        if offered is not None:
            offered = {*offered, *own}
        try:
            fetched = await self._fetch(
                client, wanted, fingerprint, forge, budget, list_runners, offered, namespace
            )
            if fetched.observation is not None:
                self.kept.keep(
                    (client.base_url, wanted, fingerprint), namespace, fetched.observation
                )
            return fetched
        except GiteaError as exc:  # past the namespace's share (forge/budget.py)
            problem = Problem(exc.reason, f"{client.base_url}: {exc}")
            return Fetched(problem=problem, error=exc)
        finally:
            if lease is not None:
                lease.close()  # what it read and parsed; what it keeps is charged above
            if self._reads is not None:  # what it cost to read, whatever it ended in
                self._reads.charge(namespace, budget.received)

    async def _fetch(
        self,
        client: GiteaClient,
        wanted: ScopeRef,
        fingerprint: str,
        forge: ForgeInfo,
        budget: AnswerBudget,
        list_runners: bool,
        offered: Collection[str] | None = None,
        namespace: str = "",
    ) -> Fetched:
        url = client.base_url
        cache_key = (url, wanted, fingerprint)
        handle_client = client
        turns = functools.partial(self.turns.turn, namespace)
        client = client.metered(budget, turns, namespace)
        try:
            async with asyncio.timeout(self._deadline):
                scope = self.resolved.get(cache_key)
                if scope is None:
                    scope = await client.resolve_scope(wanted)
                    self.resolved[cache_key] = scope
                in_progress: tuple[ActionJob, ...]
                finished: tuple[ActionJob, ...]
                if isinstance(client, ForgejoClient):
                    runners = await client.list_runners(scope)
                    # One unpaged answer holds both; running jobs carry the handles that
                    # tell which bound runner took its job. Nothing final is listed.
                    queued, running = await client.list_active_jobs(scope)
                    in_progress, finished = running.items, ()
                else:
                    kept = self.runner_lists.get(cache_key)
                    if list_runners or kept is None:
                        asked = self._clock()
                        runners = await client.list_runners(scope)
                        self.runner_lists[cache_key] = (asked, runners)
                        if runners.items:
                            self.runners_at[cache_key] = self._clock()
                    else:
                        runners = kept[1]
                    # The metrics' sample beside the jobs, not before them: it must not
                    # delay the runners a webhook woke the group for.
                    sample = asyncio.ensure_future(self._progress(client, scope, cache_key))
                    try:
                        queued = await client.list_jobs(scope, "queued", offered=offered)
                        in_progress, finished = await sample
                    finally:
                        if not sample.done():
                            sample.cancel()
        except TimeoutError:
            problem = Problem(
                "GiteaUnreachable", f"{url}: no complete answer within {self._deadline:.0f}s"
            )
            return Fetched(problem=problem)
        except asyncio.CancelledError:
            raise
        except GiteaError as exc:
            if isinstance(exc, GiteaNotFound):
                self.resolved.pop(cache_key, None)  # the target may have been renamed
            retry_after = exc.retry_after if isinstance(exc, GiteaRateLimited) else None
            if exc.detail:
                log.debug("gitea request failed", gitea=url, detail=exc.detail)
            problem = Problem(exc.reason, f"{url}: {exc}" if url not in str(exc) else str(exc))
            if isinstance(exc, GiteaTenantBudget):
                self.kept.drop(cache_key)  # its last answer is not served any more either
            return Fetched(problem=problem, retry_after=retry_after, error=exc)
        except Exception as exc:  # a bug or a library fault: a condition, never a lost task
            held = self._log_rate.admit(("unexpected", url))
            if held is not None:
                log.warning(
                    "gitea fetch failed unexpectedly", gitea=url, error=repr(exc), held_back=held
                )
            problem = Problem("GiteaError", f"{url}: the request failed; retrying")
            return Fetched(problem=problem)
        if not runners.complete and (held := self._log_rate.admit(("page cap", url))) is not None:
            log.warning(
                "runner list longer than the page cap: no runner of this scope is reaped "
                "until it fits",
                gitea=url,
                seen=len(runners.items),
                held_back=held,
            )
        observation = Observation(
            queued=queued.items,
            runners=runners.items,
            runners_complete=runners.complete,
            queued_complete=queued.complete,
            in_progress=in_progress,
            finished=finished,
            forge=forge,
            unserved=queued.unserved,
            unserved_other=queued.unserved_other,
        )
        handle = GiteaHandle(handle_client, scope, fingerprint, forge)
        return Fetched(observation=observation, handle=handle)

    async def _progress(
        self, client: GiteaClient, scope: ScopeRef, key: ScopeKey
    ) -> tuple[tuple[ActionJob, ...], tuple[ActionJob, ...]]:
        """One page of running jobs and one of the most recently finished, at most once a
        minute per scope and token, and only once a runner was listed in the scope since the
        last sample (the first is always taken: an org token learns from it which repositories
        it reads, reconcile/capacity/ledger.py): Gitea's own created/started/completed times for the
        latency and duration metrics, at a bounded cost (a sample: at most a page of
        finished jobs a minute). A failure here costs the metrics a sample, never the
        observation."""
        now = self._clock()
        last = self.progress_at.get(key)
        if last is not None and (
            now - last < PROGRESS_EVERY or self.runners_at.get(key, float("-inf")) < last
        ):
            return (), ()  # sampled recently, or no runner listed since: nothing new to see
        self.progress_at[key] = now
        self.samples += 1
        try:
            running = (await client.list_jobs(scope, "in_progress", max_pages=1)).items
            finished = (
                await client.list_jobs(scope, "completed", max_pages=1, newest_first=True)
            ).items
        except GiteaError:
            return (), ()
        if any(a.id < b.id for a, b in itertools.pairwise(finished)):
            # Gitea < 1.27 ignores the order and lists the oldest first: no recent sample.
            finished = ()
        return running, finished
