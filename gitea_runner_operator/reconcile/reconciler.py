"""Reconcile one RunnerGroup: read the pass once (:mod:`.inputs`), then dispatch to one module
per step: admission, claims, planning, losses, create, marks, status_write, teardown. What
it keeps per group is registered in one place (kit/group_memory.py) and forgotten there.

Like controller-runtime's Reconcile, it takes a key, trusts no event payload, and is safe to
run any number of times: every decision is recomputed from what the cluster and Gitea say now.
It awaits only the Kubernetes API (each call with a timeout), never Gitea: the group's poll
task owns every Gitea call, including the reaps proposed here. Nor does it await its runner
creates and marks: the group's writer sends them after it (steps/runner_writes.py).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from gitea_runner_operator.api.detach import detaching
from gitea_runner_operator.api.loss import LOSSES
from gitea_runner_operator.api.naming import runner_pattern
from gitea_runner_operator.api.observation import Problem, ProblemKind
from gitea_runner_operator.api.placement import Placement
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.api.shard import shard_label
from gitea_runner_operator.api.template_policy import RESTRICTED, TemplatePolicy
from gitea_runner_operator.kit.group_memory import GroupMemory, Table
from gitea_runner_operator.metrics import Metrics
from gitea_runner_operator.metrics.why import WhyMetrics
from gitea_runner_operator.reconcile import forgejo
from gitea_runner_operator.reconcile.capacity.accounting import Claimant
from gitea_runner_operator.reconcile.capacity.ledger import Ledger
from gitea_runner_operator.reconcile.expectations import Expectations
from gitea_runner_operator.reconcile.inputs import GroupPass, read_pass, with_answer
from gitea_runner_operator.reconcile.ports import (
    ClusterReads,
    ClusterWrites,
    GroupSource,
    ReapOrder,
    Requeue,
    Sources,
)
from gitea_runner_operator.reconcile.scaling import RACE_RECHECK, START_BOUND, queued_matching
from gitea_runner_operator.reconcile.state import GroupState
from gitea_runner_operator.reconcile.status.parts import Part, PendingLosses
from gitea_runner_operator.reconcile.steps import claims
from gitea_runner_operator.reconcile.steps.admission import Admissions
from gitea_runner_operator.reconcile.steps.backoffs import come_back
from gitea_runner_operator.reconcile.steps.create import Creator
from gitea_runner_operator.reconcile.steps.jobcache import STATUS_EVERY, CacheServers
from gitea_runner_operator.reconcile.steps.losses import record_losses
from gitea_runner_operator.reconcile.steps.marks import MARKS_REQUEUE
from gitea_runner_operator.reconcile.steps.planning import decide
from gitea_runner_operator.reconcile.steps.runner_writes import RunnerWrites
from gitea_runner_operator.reconcile.steps.status_later import LaterWrites
from gitea_runner_operator.reconcile.steps.status_write import StatusWriter
from gitea_runner_operator.reconcile.steps.stuck import note_stuck
from gitea_runner_operator.reconcile.steps.teardown import FINALIZER, Teardown
from gitea_runner_operator.reconcile.timers import next_due
from gitea_runner_operator.reconcile.why.unmatched_book import UnmatchedBook
from gitea_runner_operator.reconcile.why.unmatched_book import publish as publish_unmatched
from gitea_runner_operator.reconcile.why.unmatched_flight import Evaluations

log = structlog.get_logger(__name__)


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
        memory: GroupMemory | None = None,
        metrics: Metrics | None = None,
        ledger: Ledger | None = None,
        template_policy: TemplatePolicy = RESTRICTED,
        own_namespace: str | None = None,
        cache_servers: CacheServers | None = None,
        start_bound: float = START_BOUND,
        status_writes: LaterWrites | None = None,
        losses: PendingLosses | None = None,
        placement: Callable[[str], Placement | None] | None = None,
        admissions: Admissions | None = None,
        peer_offers: Callable[[str], Sequence[Claimant]] | None = None,
        queue: Requeue | None = None,
    ) -> None:
        self._template_policy = template_policy
        self._placement = placement
        self._start_bound = start_bound
        self._own_namespace = own_namespace
        # ``is None``: an empty memo is falsy (``__len__``). --sharding's layout shares it.
        self._admissions = (
            admissions if admissions is not None else Admissions(template_policy, own_namespace)
        )
        # ``is None``, not ``or``: an empty Ledger is falsy (``__len__``), and the one passed
        # in (with its ``notify``) must be the one used.
        self._metrics = metrics if metrics is not None else Metrics()
        self._ledger = ledger if ledger is not None else Ledger()
        self._jobcache = cache_servers
        # Loss records noted by the losses step and the poll task, written with the status.
        self._losses = losses if losses is not None else PendingLosses()
        self._cache = cache
        self._cluster = cluster
        self._sources = sources
        self._expectations = expectations
        self._clock = clock
        self._wall = wall_clock
        self._states: dict[str, GroupState] = {}
        # Why jobs wait (reconcile/why/unmatched*.py, reconcile/why/waiting.py): same registry.
        # --sharding: the peers' groups of a Gitea offer too (the layout's shapes).
        self._unmatched = UnmatchedBook(self._ledger.members, clock=clock, peers=peer_offers)
        self._why_metrics = WhyMetrics.of(self._metrics.registry)
        # Run in the background, never awaited by a pass (reconcile/why/unmatched_flight.py);
        # each Gitea's verdict is published as a metric and Events when done.
        self.unmatched = Evaluations(
            self._unmatched,
            self._ledger.members.of_url,
            functools.partial(
                publish_unmatched,
                metrics=self._why_metrics,
                group_of=self._cache.group,
                emit=self._cluster.emit_event,
                log_rate=self._unmatched.log_rate,
            ),
        )
        self._claims = claims.Claims(
            self._ledger,
            self._unmatched,
            start_bound=start_bound,
            clock=clock,
            wall_clock=wall_clock,
        )
        self._creator = Creator(
            cluster,
            expectations,
            self._metrics,
            job_ttl_seconds=job_ttl_seconds,
            clock=clock,
            shard=self._shard,
        )
        # With the work queue, the group's writer sends creates and marks after the pass; a
        # hand-over waits for them (Controller.release).
        self.writes = RunnerWrites(self._creator, cluster, self._metrics, queue, clock)
        self._teardown = Teardown(cluster, sources, clock=clock, wall_clock=wall_clock)
        self._status = StatusWriter(
            cluster,
            sources,
            self._metrics,
            self._why_metrics,
            self._ledger,
            clock=clock,
            wall_clock=wall_clock,
            later=status_writes,
            placement=placement,
        )
        # What a pass keeps per group, forgotten in this order (kit/group_memory.py): the
        # poll task first, so that it notes nothing more once the rest is forgotten.
        self.memory = memory if memory is not None else GroupMemory()
        keep = self.memory.keep
        keep(_PollTask(sources))
        keep(self.writes)  # its writes under way are cancelled
        keep(self._losses, handed_over=False)  # written with the next status, wherever
        keep(self._admissions, handed_over=False)  # a verdict on the spec, not on the replica
        # What it expected of the group's Jobs and its backoffs: this replica no longer
        # sees the group's events, so should the group come back, a Job it was waiting
        # for may be long gone (GroupState: losing it costs a retry at most).
        keep(expectations)
        keep(Table(self._states))
        keep(self._claims)  # it leaves this replica's book of members
        keep(self._status)
        if status_writes is not None:
            keep(status_writes)
        keep(self._metrics)  # each group's series are exported by one replica
        keep(self._why_metrics)

    def state(self, key: str) -> GroupState:
        return self._states.setdefault(key, GroupState())

    async def reconcile(self, key: str) -> Result:
        result = await self._reconcile(key)
        # The unmatched jobs of each Gitea with news are evaluated after the pass, from this
        # one place, in the background: the pass does not wait for them.
        self.unmatched.poke()
        return result

    async def close(self) -> None:
        """Stop the runner writes and the background evaluations (the controller stops)."""
        await self.writes.close()
        await self.unmatched.close()

    async def _reconcile(self, key: str) -> Result:
        p = read_pass(self._cache, self._expectations, key)
        if p is None:
            await self.memory.gone(key)  # everything this process kept for it
            return Result()
        state = self.state(key)
        if p.meta.get("deletionTimestamp"):
            self._claims.forget(key)
            return Result(requeue_after=await self._teardown.run(p, state))
        if (detach := detaching(p.meta, self._wall())) is not None:
            # helm uninstall leaves the group (api/detach.py): torn down as if deleted, then
            # left alone, looked at again when the mark runs out (a hook that died half-way).
            self._claims.forget(key)
            again = await self._teardown.run(p, state, since=detach.since)
            left = max(detach.until - self._wall(), 0.0) + 1.0
            return Result(requeue_after=left if again is None else min(again, left))
        if state.teardown_since is not None:
            # Back in service after a detach whose mark was removed or ran out: a later
            # deletion is a new teardown.
            state.teardown_since = state.released_uid = None
        admitted = self._admissions.admit(key, p.meta, p.group.get("spec"))
        spec = admitted.spec
        if spec is None or admitted.invalid is not None:
            self._claims.forget(key)
            await self._sources.stop(key)
            problem = admitted.invalid or Problem("InvalidSpec", "spec", ProblemKind.CONFIG)
            held = await self._status.write(p, problem, state, part=self._part(p))
            return Result(requeue_after=held)
        if (refusal := admitted.refusal) is not None:
            self._claims.forget(key)  # it creates nothing: its peers take its jobs
            await self._sources.stop(key)  # no Gitea calls, no Jobs: nothing to do for it
            held = await self._status.write(p, refusal, state, part=self._part(p))
            return Result(requeue_after=held)
        finalizers = p.meta.get("finalizers") or []
        if FINALIZER not in finalizers:
            version, wanted = str(p.meta.get("resourceVersion") or ""), [*finalizers, FINALIZER]
            await self._cluster.set_finalizers(p.namespace, p.name, wanted, version)
            # A new group has a status from its first pass on: with none, kstatus (a GitOps
            # tool's health check) has nothing to read and calls it Current. Not together
            # with the finalizer: a status patch moves the version its compare-and-swap names.
            await self._status.applying(p)
            return Result()  # the update's watch event brings us back with the new object
        # spec.cache: runners mount its config Secret, so none start before it is written.
        cache_ok = self._jobcache is None or await self._jobcache.ensure(p.group, spec)
        if cache_ok and not self._may_create(key):
            cache_ok = False  # polls and reports, holds no share, creates nothing
        source = await self._sources.ensure(key, spec)
        p = with_answer(self._cache, p, spec, source.latest)
        blocked = self._claims.report(p, state, cache_ok)
        snapshot = p.snapshot
        if snapshot is None:
            # The poll task enqueues the group when it has one; meanwhile a new generation
            # is said to be on its way (Reconciling), not left to read as the old one.
            await self._status.applying(p)
            return Result()
        if snapshot.problem is not None or snapshot.observation is None:
            problem = snapshot.problem or Problem("GiteaError", "no observation")
            held = await self._status.write(p, problem, state, spec=spec, part=self._part(p))
            return Result(requeue_after=held)
        if p.released:
            # Runners finished after Gitea was asked: plan now (churn.py), and ask again so
            # the next pass counts the real demand.
            source.wake()
        return await self._act(p, source, state, cache_ok, blocked)

    async def _act(
        self, p: GroupPass, source: GroupSource, state: GroupState, cache_ok: bool, blocked: bool
    ) -> Result:
        """The steps of a pass with an answer from Gitea: plan, hand the reaps to the poll
        task, record losses, hand creates and marks to the group's writer, and write the
        status last (so it counts the new runners)."""
        key, spec, snapshot, observation = p.key, p.spec, p.snapshot, p.observation
        assert spec is not None and snapshot is not None and observation is not None
        held_back = state.creation_held(self._clock())
        if state.unsure_creates:  # creates whose answer was lost: settle them by name first
            p = await self._creator.settle(p, state, forgejo.is_forgejo(snapshot))
        decision = decide(p, self._ledger, now=self._wall(), held_back=held_back)
        ours = runner_pattern(p.name, p.uid)
        self._metrics.observe_jobs(
            p.namespace,
            p.name,
            (*observation.in_progress, *observation.finished),
            lambda job: bool(ours.match(job.runner_name)),
        )
        source.submit(ReapOrder(p.group, decision.reap, decision.orphans))
        record_losses(self._losses, p, self._wall())
        note_stuck(decision, spec, state, self._clock())
        requeue: float | None = None
        if not cache_ok or (self._jobcache is not None and self._jobcache.settling(key)):
            # A refused config is retried, a starting server read, every STATUS_EVERY.
            requeue = STATUS_EVERY
        # Creates and marks: sent by the group's writer after the pass (steps/runner_writes.py).
        creates = decision.create if cache_ok else 0
        written = await self.writes.carry_out(p, decision, state, creates)
        created = written.created
        if creates > 0:
            p = p.created(created)
            # The ledger learns of the new runners (or of a refusal) now, not at the next
            # pass: a peer reconciled in between must not create for the same jobs.
            blocked = self._claims.report(p, state, cache_ok)
            self._ledger.share(key)  # recomputed now, peers whose share grew are told
        seen: int | None = None
        if blocked and self._ledger.share(key) is not None:
            # Holding no share, it still reports the demand it sees (status.queuedJobs).
            seen = len(queued_matching(observation, spec.label_names))
        if self._ledger.held_by_race(key) and not forgejo.is_forgejo(snapshot):
            # Waits for a peer's runner to take its job (capacity/races.py): ask again soon.
            if self._clock() - snapshot.started_at >= RACE_RECHECK:
                source.wake()
            requeue = min(requeue or RACE_RECHECK, RACE_RECHECK)
        if written.marks_left:
            # More marks are left: come back at once, after the events queued meanwhile.
            requeue = min(requeue or MARKS_REQUEUE, MARKS_REQUEUE)
        due = next_due(
            p.views,
            decision.states,
            now=self._wall(),
            startup_timeout=spec.startup_timeout_seconds,
            idle_timeout=spec.idle_timeout_seconds,
            warm_max_age=spec.warm_runner_max_age_seconds,
            start_bound=self._start_bound,
            expectation_lapses=self._expectations.next_lapse(key),
        )
        if due is not None:  # a runner's timer: no poll queues this pass any more
            requeue = min(requeue or due, due)
        part = self._part(p)
        # After a refusal, creates not yet answered are no starting runners (status.waiting).
        starting = 0 if state.create_error is not None else created
        held = await self._status.write(
            p, None, state, spec=spec, decision=decision, snapshot=snapshot, seen=seen,
            created=starting, part=part,
        )  # fmt: skip
        if LOSSES in part.fields:
            # The poll task follows the losses up in Gitea, and retires a lost runner once
            # the status written now shows the job it held (poll/rerun.py).
            source.wake()
        if held is not None:  # the status write waits for its turn (steps/status_write.py)
            requeue = min(requeue or held, held)
        # A stale share matters only to a group with jobs to serve: a quiet family, whose
        # members' answers change it on every poll, would otherwise bring every member back
        # twice a second (567 reconciles a second at 1,001 quiet groups of one family).
        wants = decision.demand > 0 or bool(queued_matching(observation, spec.label_names))
        stale = wants and self._ledger.stale(key)
        return Result(requeue_after=come_back(requeue, state, self._clock(), stale_share=stale))

    def _may_create(self, key: str) -> bool:
        """--sharding: not while the group's domain is about to move (this layout has
        changed it: no placement) nor while the group is a global one on probation
        (api/placement.py): another replica may count its jobs until every layout agrees."""
        if self._placement is None:
            return True
        placed = self._placement(key)
        return placed is not None and not placed.probation

    def _shard(self, key: str) -> str | None:
        """--sharding: the bucket of the domain the group is served in, which this replica's
        Job and Pod watches select (it creates only while it has a placement)."""
        placed = self._placement(key) if self._placement is not None else None
        return shard_label(placed.domain) if placed is not None else None

    def _part(self, p: GroupPass) -> Part:
        """What the steps and the poll task handed to this pass's status write."""
        part = self._losses.part(p.key, p.group)
        return part if self._jobcache is None else self._jobcache.part(p.group) + part

    def introduce(self, key: str, spec: RunnerGroupSpec) -> None:
        """A group taken over (--sharding) joins its family's book as its first pass would
        (no answer yet, its runners from the cache), before its poll starts: a peer whose
        answer came first must not count the family's jobs alone (a repo group's job is
        its own team's first) for want of a member its pass has not reached yet."""
        if self._claims.knows(key):
            return
        p = read_pass(self._cache, self._expectations, key)
        if p is not None:
            self._claims.report(with_answer(self._cache, p, spec, None), self.state(key), True)


@dataclass(frozen=True, slots=True)
class _PollTask:
    """The group's poll task, as a holder: forgetting the group stops it."""

    sources: Sources

    async def forget(self, key: str) -> None:
        await self.sources.stop(key)

    def knows(self, key: str) -> bool:
        return self.sources.get(key) is not None
