"""Reconcile one RunnerGroup: read the cache and the latest Gitea snapshot, decide with the
pure functions of :mod:`~gitea_runner_operator.reconcile.scaling`, act on the cluster, write
status.

Like controller-runtime's Reconcile, it takes a key, trusts no event payload, and is safe to
run any number of times: every decision is recomputed from what the cluster and Gitea say now.
It awaits only the Kubernetes API (each call with a timeout), never Gitea: the group's poll
task owns every Gitea call, including the reaps proposed here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from gitea_runner_operator.api import constants
from gitea_runner_operator.api.credentials import normalise_url
from gitea_runner_operator.api.loss import (
    MAX_LOSS_RECORDS,
    LossRecord,
    loss_records,
    losses_patch,
)
from gitea_runner_operator.api.naming import new_job_name, runner_pattern
from gitea_runner_operator.api.observation import Observation, Problem, ProblemKind, Snapshot
from gitea_runner_operator.api.pod_template import SCALE_DOWN_ANNOTATIONS
from gitea_runner_operator.api.runnergroup import InvalidSpec, RunnerGroupSpec, parse_spec
from gitea_runner_operator.api.template_policy import RESTRICTED, TemplatePolicy
from gitea_runner_operator.api.template_policy import check as check_template_policy
from gitea_runner_operator.kit.backoff import doubling
from gitea_runner_operator.kube.cluster import CreateRefused
from gitea_runner_operator.kube.forgejo_job import render_forgejo_job
from gitea_runner_operator.kube.job_template import render_runner_job
from gitea_runner_operator.kube.views import RunnerJobView, job_view, parse_time, pods_by_job
from gitea_runner_operator.metrics import Metrics
from gitea_runner_operator.reconcile import claims, forgejo
from gitea_runner_operator.reconcile.accounting import Answer
from gitea_runner_operator.reconcile.cache import STATUS_EVERY, CacheServers
from gitea_runner_operator.reconcile.churn import unsettled
from gitea_runner_operator.reconcile.expectations import Expectations
from gitea_runner_operator.reconcile.ledger import MIN_INTERVAL, Ledger
from gitea_runner_operator.reconcile.leftovers import Leftovers, describe
from gitea_runner_operator.reconcile.loss import find_losses
from gitea_runner_operator.reconcile.ports import (
    ClusterReads,
    ClusterWrites,
    GroupSource,
    ReapOrder,
    Sources,
)
from gitea_runner_operator.reconcile.report import StatusWriter
from gitea_runner_operator.reconcile.scaling import (
    Plan,
    ReapReason,
    RunnerState,
    group_registrations,
    matching_demand,
    plan,
    runner_state,
    teardown,
)
from gitea_runner_operator.reconcile.state import GroupState
from gitea_runner_operator.reconcile.unmatched_book import UnmatchedBook
from gitea_runner_operator.reconcile.unmatched_book import publish as publish_unmatched
from gitea_runner_operator.reconcile.why_metrics import WhyMetrics

log = structlog.get_logger(__name__)

FINALIZER = f"{constants.GROUP}/teardown"
# Creation backs off after runners that could not start or did not take their jobs.
STUCK_BACKOFF_BASE = 60.0
STUCK_BACKOFF_MAX = 1800.0
CREATE_BACKOFF_BASE = 5.0
# Annotation writes (took-job, scale-down guards) one pass makes at most, and how soon the
# next pass comes for the rest: a pass stays short, so a finished runner is replaced at once.
BOOKKEEPING_PER_PASS = 20
BOOKKEEPING_REQUEUE = 0.05
CREATE_BACKOFF_MAX = 300.0
# A deleting group waits this long for a fresh answer from Gitea before giving up on it.
TEARDOWN_ANSWER_GRACE = 60.0
# After the drain timeout, the last removals (registrations of runners stopped at the drain
# timeout, the hook) get this long; then the finalizer goes whatever Gitea says.
TEARDOWN_FINAL_GRACE = 30.0
# Secret answers that mean the credentials are gone for good (a deleted namespace takes its
# Secrets and RoleBindings along), unlike a read that failed this once.
CREDENTIALS_GONE = frozenset(
    {"SecretNotFound", "SecretKeyMissing", "SecretForbidden", "SecretNotAllowed"}
)


@dataclass(frozen=True, slots=True)
class Result:
    requeue_after: float | None = None


class Reconciler:
    def __init__(
        self,
        cache: ClusterReads,
        cluster: ClusterWrites,
        sources: Sources,
        expectations: Expectations,
        *,
        job_ttl_seconds: int = 600,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        on_group_gone: Callable[[str], None] | None = None,
        metrics: Metrics | None = None,
        ledger: Ledger | None = None,
        template_policy: TemplatePolicy = RESTRICTED,
        own_namespace: str | None = None,
        cache_servers: CacheServers | None = None,
        start_bound: float = claims.START_BOUND,
    ) -> None:
        self._start_bound = start_bound
        self._template_policy = template_policy
        self._own_namespace = own_namespace
        # ``is None``, not ``or``: an empty Ledger is falsy (``__len__``), and the one passed
        # in (with its ``notify``) must be the one used.
        self._metrics = metrics if metrics is not None else Metrics()
        self._ledger = ledger if ledger is not None else Ledger()
        self._caches = cache_servers
        self._cache = cache
        self._cluster = cluster
        self._sources = sources
        self._expectations = expectations
        self._job_ttl = job_ttl_seconds
        self._clock = clock
        self._wall = wall_clock
        self._on_gone = on_group_gone
        self._states: dict[str, GroupState] = {}
        # Why jobs wait (reconcile/unmatched*.py, reconcile/waiting.py): same registry.
        self._unmatched = UnmatchedBook(clock=clock)
        self._why_metrics = WhyMetrics.of(self._metrics.registry)
        self._status = StatusWriter(
            cluster,
            sources,
            expectations,
            self._metrics,
            self._why_metrics,
            self._ledger,
            clock=clock,
            wall_clock=wall_clock,
        )

    def state(self, key: str) -> GroupState:
        return self._states.setdefault(key, GroupState())

    async def reconcile(self, key: str) -> Result:
        group = self._cache.group(key)
        if group is None:
            await self._forget(key)
            return Result()
        meta = group["metadata"]
        views = self._job_views(key)
        if meta.get("deletionTimestamp"):
            return await self._teardown(key, group, views)
        try:
            spec = parse_spec(group.get("spec"))
        except InvalidSpec as exc:
            self._ledger.remove(key)
            await self._publish_unmatched(self._unmatched.remove(key), force=True)
            await self._sources.stop(key)
            problem = Problem("InvalidSpec", exc.message, ProblemKind.CONFIG)
            await self._status.write(key, group, problem, self.state(key), views=views)
            return Result()
        if (refused := self._refused(meta, spec)) is not None:
            self._ledger.remove(key)  # it creates nothing: its peers take its jobs
            await self._sources.stop(key)  # no Gitea calls, no Jobs: nothing to do for it
            await self._status.write(key, group, refused, self.state(key), views=views)
            return Result()
        if FINALIZER not in (meta.get("finalizers") or []):
            await self._cluster.set_finalizers(
                meta["namespace"],
                meta["name"],
                [*(meta.get("finalizers") or []), FINALIZER],
                str(meta.get("resourceVersion") or ""),
            )
            return Result()  # the update's watch event brings us back with the new object
        # spec.cache: runners mount its config Secret, so none start before it is written.
        cache_ok = self._caches is None or await self._caches.ensure(group, spec)

        source = await self._sources.ensure(key, spec)
        snapshot = source.latest
        state = self.state(key)
        released = self._unsettled(key, snapshot)
        blocked = self._report(key, spec, views, snapshot, state, released, cache_ok)
        await self._publish_unmatched(normalise_url(spec.gitea.url))
        if snapshot is None:
            return Result()  # the poll task enqueues the group when it has one
        if snapshot.problem is not None or snapshot.observation is None:
            problem = snapshot.problem or Problem("GiteaError", "no observation")
            await self._status.write(key, group, problem, state, views=views, spec=spec)
            return Result()
        if released:
            # Runners finished after Gitea was asked: plan now (churn.py), and ask again so
            # the next pass counts the real demand.
            source.wake()

        decision = self._plan(key, group, spec, views, snapshot, state, released)
        on_forgejo = forgejo.is_forgejo(snapshot)
        if on_forgejo:
            decision = self._forgejo_reaps(key, spec, views, snapshot, decision)
        ours = runner_pattern(meta["name"], meta["uid"])
        self._metrics.observe_jobs(
            meta["namespace"],
            meta["name"],
            (*snapshot.observation.in_progress, *snapshot.observation.finished),
            lambda job: bool(ours.match(job.runner_name)),
        )
        source.submit(ReapOrder(group, decision.reap, decision.orphans))
        if await self._record_losses(key, group, views, snapshot):
            source.wake()  # the poll task follows the loss up in Gitea
        self._note_stuck(key, group, decision, spec, state)
        requeue: float | None = None
        created = 0
        if not cache_ok:
            requeue = STATUS_EVERY
        elif decision.create > 0:
            created = await self._create(key, group, spec, decision, state, on_forgejo)
            # The ledger learns of the new runners (or of a refusal) now, not at the next
            # pass: a peer reconciled in between must not create for the same jobs.
            blocked = self._report(key, spec, views, snapshot, state, released, cache_ok)
            self._ledger.share(key)  # recomputed now, peers whose share grew are told
        seen: int | None = None
        if blocked and self._ledger.share(key) is not None:
            # Holding no share, it still reports the demand it sees (status.queuedJobs).
            seen = len(matching_demand(snapshot.observation.queued, spec.label_names))
        if self._clock() < state.blocked_until:
            requeue = min(requeue or STUCK_BACKOFF_MAX, state.blocked_until - self._clock())
        if self._ledger.stale(key):
            # Read a share computed before the latest change in its family: look again once
            # the family's assignment may be recomputed (ledger.MIN_INTERVAL).
            requeue = min(requeue or MIN_INTERVAL, MIN_INTERVAL)
        if state.create_error is not None and self._clock() < state.create_retry_at:
            # Try again, and claim jobs again (accounting), once the create back-off ends.
            requeue = min(requeue or CREATE_BACKOFF_MAX, state.create_retry_at - self._clock())
        if await self._mark_busy(meta["namespace"], views, decision):
            # More bookkeeping is left: come back at once, after the events queued meanwhile.
            requeue = min(requeue or BOOKKEEPING_REQUEUE, BOOKKEEPING_REQUEUE)
        await self._status.write(
            key,
            group,
            None,
            state,
            views=views,
            spec=spec,
            decision=decision,
            snapshot=snapshot,
            seen=seen,
            created=created,
        )
        return Result(requeue_after=requeue)

    # -- deciding -------------------------------------------------------------------------------

    def _refused(self, meta: dict[str, Any], spec: RunnerGroupSpec) -> Problem | None:
        """What the platform does not let this group have (its namespace, its template):
        checked before any Job exists, named by field."""
        if self._own_namespace is not None and meta.get("namespace") == self._own_namespace:
            return Problem(
                "NamespaceNotAllowed",
                f"RunnerGroups in the operator's own namespace ({self._own_namespace}) are "
                "refused: runner Pods there would run beside the operator and its credentials",
                ProblemKind.CONFIG,
            )
        refusal = check_template_policy(spec.template, spec.mode.value, self._template_policy)
        if refusal is not None:
            return Problem("TemplateNotAllowed", str(refusal), ProblemKind.CONFIG)
        return None

    def _plan(
        self,
        key: str,
        group: dict[str, Any],
        spec: RunnerGroupSpec,
        views: list[RunnerJobView],
        snapshot: Snapshot,
        state: GroupState,
        released: int = 0,
    ) -> Plan:
        assert snapshot.observation is not None
        present = {v.name for v in views}
        assigned = self._ledger.share(key)
        # A share computed before the latest change in its family (ledger.MIN_INTERVAL) may
        # still hold jobs that runners took since: weighed against this group's runners as
        # they are now it could create for a covered job. Create only on a current share;
        # the pass comes back once the family's assignment may be recomputed.
        stale = self._ledger.stale(key)
        decision = plan(
            group_name=group["metadata"]["name"],
            group_uid=group["metadata"]["uid"],
            jobs=views,
            observation=snapshot.observation,
            offered=spec.label_names,
            max_active=spec.max_active_runners,
            idle_timeout=spec.idle_timeout_seconds,
            startup_timeout=spec.startup_timeout_seconds,
            now=self._wall(),
            pending_creations=self._expectations.pending(key, present),
            creation_blocked=self._clock() < state.blocked_until or stale,
            assigned=assigned,
            min_idle=spec.min_idle_runners,
            warm_max_age=spec.warm_runner_max_age_seconds,
            unsettled=released,
        )
        room = self._ledger.room(key)
        if room is not None and decision.create > room + spec.min_idle_runners:
            # Whichever runner asks first takes a job: never more than can surely find one.
            decision = dataclasses.replace(decision, create=room + spec.min_idle_runners)
        return decision

    def _unsettled(self, key: str, snapshot: Snapshot | None) -> int:
        """Runners that finished after the snapshot was asked for and may have taken a job it
        still lists as queued (churn.py)."""
        if snapshot is None or snapshot.observation is None:
            return 0
        finished = self._cache.released_since(key, snapshot.started_at)
        return unsettled(finished, snapshot.observation.runners) if finished else 0

    def _can_create(self, snapshot: Snapshot | None, state: GroupState, cache_ok: bool) -> bool:
        """Whether the group could start a runner now: only then does it claim jobs by its
        spare capacity, so a broken group never holds jobs a healthy peer could run."""
        now = self._clock()
        if snapshot is not None and snapshot.problem is not None:
            return False  # not Ready: Gitea, a Secret or the configuration is at fault
        if not cache_ok:
            return False  # runners would not start before its cache config exists
        if now < state.blocked_until:
            return False  # backing off after runners that could not start
        return state.create_error is None or now >= state.create_retry_at

    def _report(
        self,
        key: str,
        spec: RunnerGroupSpec,
        views: list[RunnerJobView],
        snapshot: Snapshot | None,
        state: GroupState,
        released: int,
        cache_ok: bool,
    ) -> bool:
        """Tell the ledger what this group knows of itself: its runners, its room, its
        latest answer. Costs this group's own Jobs only. True when the group is blocked (it
        holds no share: claims.py)."""
        observation = snapshot.observation if snapshot is not None else None
        by_name = {r.name: r for r in observation.runners} if observation else {}
        states = {v.name: runner_state(v, by_name) for v in views}
        blocked = not self._can_create(snapshot, state, cache_ok)
        if snapshot is not None and observation is not None:
            for name, runner in states.items():
                if runner is RunnerState.BUSY:
                    state.busy_since.setdefault(name, snapshot.started_at)
        state.busy_since = {
            n: t for n, t in state.busy_since.items() if states.get(n) is RunnerState.BUSY
        }
        claimant = claims.claimant(
            key,
            spec,
            views,
            states,
            pending=self._expectations.pending(key, {v.name for v in views}),
            released=released,
            blocked=blocked,
            now=self._wall(),
            start_bound=self._start_bound,
            busy_since=tuple(sorted(state.busy_since.values())),
        )
        answer = None
        if snapshot is not None and observation is not None and snapshot.problem is None:
            answer = Answer(key, snapshot.started_at, observation.queued)
        self._ledger.report(
            normalise_url(spec.gitea.url),
            claimant,
            answer,
            (*observation.in_progress, *observation.finished) if observation else (),
        )
        self._unmatched.report(
            normalise_url(spec.gitea.url), claimant, answer.jobs if answer else None
        )
        return blocked or claims.late_runners(views, states, self._wall(), self._start_bound) > 0

    async def _publish_unmatched(self, url: str | None, *, force: bool = False) -> None:
        """Unmatched jobs of that Gitea (reconcile/unmatched.py): metric and Events."""
        verdict = self._unmatched.evaluate(url, force=force) if url is not None else None
        if verdict is not None:
            await publish_unmatched(
                verdict, self._why_metrics, self._cache.group, self._cluster.emit_event
            )

    def _forgejo_reaps(
        self,
        key: str,
        spec: RunnerGroupSpec,
        views: list[RunnerJobView],
        snapshot: Snapshot,
        decision: Plan,
    ) -> Plan:
        """Add the runners bound to a Forgejo job that is gone (reconcile/forgejo.py)."""
        assert snapshot.observation is not None
        by_name = {r.name: r.id for r in snapshot.observation.runners}
        ids = {v.name: tuple(by_name[n] for n in (*v.pod_names, v.name) if n in by_name)
               for v in views}  # fmt: skip
        proposed = {c.job_name for c in decision.reap}
        surplus = forgejo.surplus_suspended(
            views,
            decision.states,
            demand=decision.demand,
            not_busy=decision.not_busy,
            min_idle=spec.min_idle_runners,
        )
        stale = [
            c
            for c in surplus
            + forgejo.stale_bindings(
                views,
                forgejo.job_handles(self._cache.runner_jobs(key)),
                decision.states,
                snapshot.observation,
                ids,
            )
            if c.job_name not in proposed
        ]
        return dataclasses.replace(decision, reap=(*decision.reap, *stale)) if stale else decision

    def _note_stuck(
        self,
        key: str,
        group: dict[str, Any],
        decision: Plan,
        spec: RunnerGroupSpec,
        state: GroupState,
    ) -> None:
        """Runners reaped because they never started, or idled while matching jobs waited,
        will not do better if replaced at once: hold creation back, doubling each time, and
        tell the user why. A runner that takes a job ends the episode."""
        if decision.count(RunnerState.BUSY) > 0 and state.stuck_failures:
            state.stuck_failures, state.blocked_until, state.stuck_message = 0, 0.0, None
        new = [
            c
            for c in decision.reap
            if c.reason in (ReapReason.IDLE_WITH_DEMAND, ReapReason.STARTUP_TIMEOUT)
            and c.job_name not in state.stuck_jobs
        ]
        if not new:
            return
        state.stuck_jobs.update(c.job_name for c in new)
        state.stuck_failures += 1
        delay = doubling(STUCK_BACKOFF_BASE, STUCK_BACKOFF_MAX, state.stuck_failures)
        state.blocked_until = self._clock() + delay
        idle = [c.job_name for c in new if c.reason is ReapReason.IDLE_WITH_DEMAND]
        if idle:
            state.stuck_message = (
                f"runner(s) {', '.join(idle)} stayed idle for spec.idleTimeout "
                f"({spec.idle_timeout}) while {decision.demand} matching job(s) were queued. "
                "Likely causes: a label the runner parses differently from spec.labels, a "
                "registration token of another scope than spec.scope, or a runner image too "
                "old for these labels. New runners are held back for "
                f"{delay:.0f}s"
            )
        else:
            names = ", ".join(c.job_name for c in new)
            state.stuck_message = (
                f"runner(s) {names} did not register within spec.startupTimeout "
                f"({spec.startup_timeout}); check the runner Pods, spec.gitea.url from "
                f"inside the cluster and spec.registrationToken. New runners are held back "
                f"for {delay:.0f}s"
            )

    # -- acting ---------------------------------------------------------------------------------

    async def _mark_busy(self, namespace: str, views: list[RunnerJobView], decision: Plan) -> bool:
        """Mark runners that took their job (``took-job``) and guard their Pods against node
        scale-down (a node autoscaler must not evict a running CI job; idle and starting
        runners never get this, so they never hold a node). At most
        ``BOOKKEEPING_PER_PASS`` writes, concurrently: when a wave of runners turns busy at
        once, one pass writing them all one after the other took 10 s and more, and a runner
        finishing meanwhile waited that long for its replacement (issue 27). True when some
        are left for the next pass."""
        took = {constants.TOOK_JOB_ANNOTATION: "true"}
        marks = [(self._cluster.annotate_job, name, took) for name in decision.mark_took_job]
        guards = [
            (self._cluster.annotate_pod, pod, dict(SCALE_DOWN_ANNOTATIONS))
            for view in views
            if decision.states.get(view.name) is RunnerState.BUSY
            for pod in view.unguarded_pods
        ]
        writes = [*marks, *guards]
        now, later = writes[:BOOKKEEPING_PER_PASS], writes[BOOKKEEPING_PER_PASS:]
        results = await asyncio.gather(
            *(write(namespace, name, body) for write, name, body in now), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return bool(later)

    async def _record_losses(
        self, key: str, group: dict[str, Any], views: list[RunnerJobView], snapshot: Snapshot
    ) -> bool:
        """Write down, in the group's status, each runner newly lost while it held a job
        (reconcile/loss.py); the group's poll task does the rest in Gitea. At most
        ``MAX_LOSS_RECORDS`` are kept: a flood of losses is logged, never written without
        bound (an object grown too large would fail every write, creates included)."""
        assert snapshot.observation is not None
        pods = pods_by_job([*self._cache.runner_pods(key), *self._cache.deleted_pods(key)])
        records = loss_records(group)
        lost = find_losses(views, pods, records, snapshot.observation.runners)
        room = max(0, MAX_LOSS_RECORDS - len(records))
        if len(lost) > room:
            log.warning(
                "runner losses not recorded: too many open",
                group=key,
                lost=len(lost),
                recorded=room,
                jobs=[loss.job_name for loss in lost[room:]][:10],
            )
        lost = lost[:room]
        if not lost:
            return False
        now = self._wall()
        await self._cluster.patch_group_status(
            group["metadata"]["namespace"],
            group["metadata"]["name"],
            losses_patch(
                {
                    loss.job_name: LossRecord(pod=loss.pod, cause=loss.cause, at=now).encode()
                    for loss in lost
                }
            ),
        )
        for loss in lost:
            log.warning("runner lost", group=key, job=loss.job_name, pod=loss.pod, cause=loss.cause)
        return True

    async def _create(
        self,
        key: str,
        group: dict[str, Any],
        spec: RunnerGroupSpec,
        decision: Plan,
        state: GroupState,
        on_forgejo: bool = False,
    ) -> int:
        """Create in doubling batches (1, 2, 4, ...) like the Job controller's slow start, so
        a quota or admission refusal costs one failed request, not hundreds."""
        meta = group["metadata"]
        created: list[str] = []
        remaining, batch = decision.create, 1
        error: CreateRefused | None = None
        while remaining > 0 and error is None:
            size = min(batch, remaining)
            names = [new_job_name(meta["name"], meta["uid"]) for _ in range(size)]
            for name in names:  # before the create: the watch may beat the response
                self._expectations.expect(key, name)
            results = await asyncio.gather(
                *(
                    self._cluster.create_job(self._render(group, spec, name, on_forgejo))
                    for name in names
                ),
                return_exceptions=True,
            )
            unsure: BaseException | None = None
            for name, res in zip(names, results, strict=True):
                if isinstance(res, CreateRefused):
                    # A definite no from the API server: the Job does not exist.
                    self._expectations.lower(key, name)
                    error = res
                elif isinstance(res, BaseException):
                    # A timeout or a lost connection: the Job may well exist. It stays
                    # expected (until the cache shows it, or the expectation times out), so
                    # the next pass does not create it a second time.
                    unsure = unsure or res
                else:
                    created.append(name)
            if unsure is not None:
                if created:
                    self._metrics.runners_created(meta["namespace"], meta["name"], len(created))
                raise unsure
            remaining -= size
            batch *= 2
        logger = log.bind(group=key)
        self._metrics.runners_created(meta["namespace"], meta["name"], len(created))
        if created:
            logger.info(
                "created runner jobs",
                jobs=created,
                demand=decision.demand,
                alive=decision.alive,
                not_busy=decision.not_busy,
            )
            await self._cluster.emit_event(
                group,
                "Normal",
                "RunnersCreated",
                f"Created {len(created)} runner Job(s) for {decision.demand} queued job(s): "
                + ", ".join(created),
            )
        if error is not None:
            first = state.create_error is None
            state.create_error = f"creating a runner Job was refused: {error}"
            state.create_failures += 1
            state.create_retry_at = self._clock() + doubling(
                CREATE_BACKOFF_BASE, CREATE_BACKOFF_MAX, state.create_failures
            )
            if first:
                logger.warning("runner job creation refused", error=str(error))
                await self._cluster.emit_event(group, "Warning", "JobCreateRefused", str(error))
        elif created:
            state.create_error, state.create_failures = None, 0
        return len(created)

    def _render(
        self, group: dict[str, Any], spec: RunnerGroupSpec, name: str, on_forgejo: bool = False
    ) -> dict[str, Any]:
        meta = group["metadata"]
        return (render_forgejo_job if on_forgejo else render_runner_job)(
            group_name=meta["name"],
            namespace=meta["namespace"],
            group_uid=meta["uid"],
            spec=spec,
            job_name=name,
            ttl_seconds_after_finished=self._job_ttl,
        )

    async def _teardown(
        self, key: str, group: dict[str, Any], views: list[RunnerJobView]
    ) -> Result:
        meta = group["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        self._ledger.remove(key)
        await self._publish_unmatched(self._unmatched.remove(key), force=True)
        if FINALIZER not in finalizers:
            await self._sources.stop(key)
            return Result()  # held by someone else's finalizer: nothing of ours to do
        if self.state(key).released_uid == meta.get("uid"):
            return Result()  # released already; the watch will show it gone
        try:
            spec: RunnerGroupSpec | None = parse_spec(group.get("spec"))
        except InvalidSpec:
            spec = None
        deleted_at = parse_time(meta.get("deletionTimestamp")) or self._wall()
        drain = spec.drain_timeout_seconds if spec is not None else 0.0
        drained = self._wall() >= deleted_at + drain
        source = await self._sources.ensure(key, spec) if spec is not None else None
        state = self.state(key)
        if state.teardown_since is None:
            state.teardown_since = self._clock()
            if source is not None:
                source.wake()
        snapshot = source.latest if source is not None else None
        if snapshot is not None and snapshot.started_at < state.teardown_since:
            snapshot = None  # asked before the teardown began: may miss new registrations
        observation = snapshot.observation if snapshot is not None else None
        plan_ = teardown(
            group_name=meta["name"],
            group_uid=meta["uid"],
            jobs=views,
            observation=observation,
            drained=drained,
        )
        hooked = spec is not None and spec.manages_hook
        if source is not None:
            source.submit(
                ReapOrder(group, plan_.reap, plan_.orphans, remove_hook=hooked, deleting=True)
            )
            source.wake()
        for job_name in plan_.force_delete:
            await self._cluster.delete_job(meta["namespace"], job_name)
        if not spec:
            # Nothing to ask Gitea with: clean the cluster side and let the object go.
            for view in views:
                if view.alive:
                    await self._cluster.delete_job(meta["namespace"], view.name)
        # Never wedge: after the drain timeout (plus a short grace for the last removals)
        # the finalizer goes whatever Gitea says, refusal and silence alike; at once when
        # Gitea answered with a failure, or when no runner is left and the credentials are
        # gone (nothing could be removed anyway).
        failed = snapshot is not None and snapshot.problem is not None
        silent = self._clock() - state.teardown_since > TEARDOWN_ANSWER_GRACE
        alive = tuple(v.name for v in views if v.alive)
        creds_gone = (
            snapshot is not None
            and snapshot.problem is not None
            and snapshot.problem.reason in CREDENTIALS_GONE
            and not alive
        )
        final = self._wall() >= deleted_at + drain + TEARDOWN_FINAL_GRACE
        unanswered = observation is None and (failed or silent)
        give_up = creds_gone or (drained and (final or unanswered))
        done = plan_.done and (not hooked or (source is not None and source.hook_removed))
        if done or spec is None or give_up:
            if not done and spec is not None:
                message = describe(
                    self._leftovers(meta, source, observation, alive, hooked),
                    snapshot.problem.message
                    if snapshot is not None and snapshot.problem is not None
                    else "Gitea did not answer"
                    if observation is None
                    else "Gitea answered but refused or failed the removals (see the operator log)",
                    at_once=creds_gone and not drained,
                )
                log.warning("teardown incomplete", group=key, reason=message)
                await self._cluster.emit_event(group, "Warning", "TeardownIncomplete", message)
            finalizers.remove(FINALIZER)
            await self._cluster.set_finalizers(
                meta["namespace"], meta["name"], finalizers, str(meta.get("resourceVersion"))
            )
            state.released_uid = meta.get("uid")
            log.info("teardown complete, finalizer released", group=key)
            return Result()
        return Result(requeue_after=2.0 if drained else 5.0)

    @staticmethod
    def _leftovers(
        meta: dict[str, Any],
        source: GroupSource | None,
        observation: Observation | None,
        alive: tuple[str, ...],
        hooked: bool,
    ) -> Leftovers:
        """What a giving-up teardown leaves behind: by the freshest runner list there is
        (one from before the deletion still names every runner that existed then)."""
        if observation is None and source is not None and source.latest is not None:
            observation = source.latest.observation
        registrations = (
            tuple(group_registrations(meta["name"], meta["uid"], observation.runners))
            if observation is not None
            else None
        )
        return Leftovers(
            registrations=registrations,
            alive_jobs=alive,
            hook_left=hooked and not (source is not None and source.hook_removed),
            hook_id=source.kept_hook_id if source is not None else None,
        )

    async def _forget(self, key: str) -> None:
        """The group is gone: drop everything this process kept for it."""
        await self._sources.stop(key)
        self._ledger.remove(key)
        await self._publish_unmatched(self._unmatched.remove(key), force=True)
        self._expectations.forget(key)
        self._states.pop(key, None)
        namespace, _, name = key.partition("/")
        self._metrics.forget_group(namespace, name)
        self._why_metrics.forget_group(namespace, name)
        if self._on_gone is not None:
            self._on_gone(key)

    def _job_views(self, key: str) -> list[RunnerJobView]:
        pods = pods_by_job(self._cache.runner_pods(key))
        return [
            job_view(job, pods.get(job["metadata"]["name"], []))
            for job in self._cache.runner_jobs(key)
        ]
