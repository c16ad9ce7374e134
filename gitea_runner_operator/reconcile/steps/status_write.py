"""A group's status, conditions, Events, gauges and log lines after one reconcile pass: the
one writer of a group's ``status``. The steps and the poll task hand their parts to the pass
(reconcile/status/parts.py: ``cache``, ``losses``); the whole status is composed by a pure function
(reconcile/status/compose.py), and this writer only holds back, sends and records it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from gitea_runner_operator.api.observation import Problem, ProblemKind, Snapshot
from gitea_runner_operator.api.placement import Placement
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.kit.clock import iso_timestamp, utc_now_iso
from gitea_runner_operator.metrics import Metrics
from gitea_runner_operator.metrics.why import WhyMetrics
from gitea_runner_operator.reconcile.capacity.ledger import Ledger
from gitea_runner_operator.reconcile.inputs import GroupPass
from gitea_runner_operator.reconcile.ports import ClusterWrites, Sources
from gitea_runner_operator.reconcile.scaling import Plan, RunnerState, queued_matching
from gitea_runner_operator.reconcile.state import GroupState
from gitea_runner_operator.reconcile.status import conditions as st
from gitea_runner_operator.reconcile.status.compose import Composed, Found, compose
from gitea_runner_operator.reconcile.status.parts import NOTHING, Part
from gitea_runner_operator.reconcile.steps.status_later import LaterWrites, Patch
from gitea_runner_operator.reconcile.why.waiting import (
    HeldBack,
    explain_waiting,
    held_by_problem,
    peers_serving,
)

log = structlog.get_logger(__name__)

# A problem that persists is logged again this often (not once per poll).
LOG_REMINDER = 600.0
# A group's status is patched at most once per this many seconds: passes in between (a
# filling group reconciles several times a second) are folded into the next patch.
STATUS_MIN_INTERVAL = 1.0
# The status this process last wrote counts as current for this long, even before the
# watch shows it (the next pass must not write the same status again meanwhile).
WRITTEN_TRUSTED_FOR = 10.0


@dataclass(slots=True)
class StatusWriter:
    """Writes a group's status, conditions, Events, gauges and log lines after a pass."""

    cluster: ClusterWrites
    sources: Sources
    metrics: Metrics
    why_metrics: WhyMetrics
    ledger: Ledger
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    # key -> (when, hash of the status) of this process's last patch
    written: dict[str, tuple[float, int]] = field(default_factory=dict)
    # key -> the generation this process last said was being applied (``applying``)
    announced: dict[str, int] = field(default_factory=dict)
    # Set: a pass's status (not a problem's) is written by the group's writer after the
    # pass (reconcile/steps/status_later.py), so no worker waits for a write token.
    later: LaterWrites | None = None
    # --sharding: where a group is served (status.domain); None without sharding, when a
    # domain left by an earlier sharded run is removed.
    placement: Callable[[str], Placement | None] | None = None

    def forget(self, key: str) -> None:
        # Its pending write (``later``) is a holder of its own (kit/group_memory.py).
        self.written.pop(key, None)
        self.announced.pop(key, None)

    def knows(self, key: str) -> bool:
        return key in self.written or key in self.announced

    def _hold_back(self, key: str, digest: int) -> tuple[bool, float | None]:
        """Whether to skip this write, and if so when to come back (None: never, it was
        written already). At most one patch per group per STATUS_MIN_INTERVAL."""
        now = self.clock()
        pending = self.later.pending(key) if self.later is not None else None
        if pending is not None and pending.digest == digest:
            return True, None  # handed to the group's writer already
        last = self.written.get(key)
        if last is not None and last[1] == digest and now - last[0] < WRITTEN_TRUSTED_FOR:
            return True, None
        if last is not None and now - last[0] < STATUS_MIN_INTERVAL:
            return True, last[0] + STATUS_MIN_INTERVAL - now
        return False, None

    async def write(
        self,
        p: GroupPass,
        problem: Problem | None,
        state: GroupState,
        *,
        spec: RunnerGroupSpec | None = None,
        decision: Plan | None = None,
        snapshot: Snapshot | None = None,
        seen: int | None = None,
        created: int = 0,
        part: Part = NOTHING,
    ) -> float | None:
        """``seen``: the matching jobs a blocked group sees, reported as its demand although
        its family's accounting gave them to its peers. ``part``: what the steps and the poll
        task handed to the pass (reconcile/status/parts.py). Returns when to come back (seconds)
        if the write was held back (STATUS_MIN_INTERVAL), else None."""
        key, meta = p.key, p.meta
        previous = p.group.get("status") or {}
        now = self.wall_clock()
        state.secret_since = _since(problem, state.secret_since, now)
        found = self._found(p, problem, state, spec, decision, snapshot, seen, previous, now)
        if decision is not None and snapshot is not None and spec is not None:
            waiting = self._waiting(key, meta, spec, snapshot, decision, created, found, state)
            part = Part(waiting) + part
        elif problem is not None and not problem.kind.backs_off:
            held = held_by_problem(previous, problem.reason)  # a failing peer keeps the last
            oldest = held.oldest.timestamp() if held.oldest is not None else None
            self.why_metrics.waiting(meta["namespace"], meta["name"], held.counts(), oldest)
            part = Part({"waiting": held.status()}) + part
        part = Part(self._domain(key, meta, previous)) + part
        self._log_transitions(key, found.ready, found.healthy, state)
        self._observed(p, spec, found, decision)
        # The same failed answer queues no pass: come back when the grace ends.
        grace = None if found.stalled else st.grace_left(problem, since=state.secret_since, now=now)
        composed = compose(previous, found, part, utc_now_iso())
        if not st.status_differs(previous, composed.status) or _domain_only(
            previous, composed.status
        ):
            return grace
        digest = hash(json.dumps(composed.status, sort_keys=True, default=str))
        skip, come_back = self._hold_back(key, digest)
        if skip:
            return _sooner(come_back, grace)
        patch = Patch(digest, lambda: self._send(p, composed, digest))
        if self.later is not None and decision is not None:
            self.later.hand(key, patch)
        else:
            await patch.write()
        return grace

    async def _send(self, p: GroupPass, composed: Composed, digest: int) -> None:
        """Patch the status, record it (only once it is written), then the Events."""
        await self.cluster.patch_group_status(p.namespace, p.name, composed.status)
        self.written[p.key] = (self.clock(), digest)
        for reason, message in composed.events:
            await self.cluster.emit_event(p.group, "Warning", reason, message)

    def _found(
        self,
        p: GroupPass,
        problem: Problem | None,
        state: GroupState,
        spec: RunnerGroupSpec | None,
        decision: Plan | None,
        snapshot: Snapshot | None,
        seen: int | None,
        previous: dict[str, Any],
        now: float,
    ) -> Found:
        """What the pass found, as the status reports it."""
        counts: dict[str, int] | None = None
        queued: int | None = None
        complete = True
        if decision is not None:
            queued = decision.demand if seen is None else seen
            counts = {
                "starting": decision.count(RunnerState.STARTING) + p.pending,
                "idle": decision.count(RunnerState.IDLE),
                "busy": decision.count(RunnerState.BUSY),
            }
            if snapshot is not None and snapshot.observation is not None:
                complete = snapshot.observation.queued_complete
        max_active = spec.max_active_runners if spec is not None and problem is None else 0
        ready = st.ready_condition(
            problem, demand=queued or 0, alive=p.alive, max_active=max_active, complete=complete
        )
        healthy = st.runners_healthy_condition(
            failed_jobs=[v.name for v in p.views if v.failed],
            start_failures=list(decision.start_failures) if decision is not None else [],
            stuck=state.stuck_message if self.clock() < state.blocked_until else None,
            create_error=state.create_error,
        )
        managed = spec.manages_hook if spec is not None else None
        source = self.sources.get(p.key)
        return Found(
            problem=problem,
            generation=int(p.meta.get("generation") or 0),
            alive=p.alive,
            ready=ready,
            healthy=healthy,
            stalled=st.stalls(problem, since=state.secret_since, now=now, previous=previous),
            queued=queued,
            runners=counts,
            snapshot=snapshot,
            target=spec.target if spec is not None else None,
            manages_hook=managed,
            hook=source.hook if source is not None and managed else None,
            cadence=source.cadence if source is not None and spec is not None else None,
            base_interval=spec.poll_interval_seconds if spec is not None else None,
        )

    def _observed(
        self, p: GroupPass, spec: RunnerGroupSpec | None, found: Found, decision: Plan | None
    ) -> None:
        """The group's gauges, whether or not its status changed."""
        ns, name = p.namespace, p.name
        ready = found.ready["status"] == "True"
        counts = found.runners
        if counts is not None and spec is not None:
            self.metrics.group_observed(
                ns,
                name,
                queued=found.queued or 0,
                starting=counts["starting"],
                idle=counts["idle"],
                busy=counts["busy"],
                desired=p.alive,
                max_active=spec.max_active_runners,
                ready=ready,
                failed=sum(1 for v in p.views if v.failed),
            )
        else:
            self.metrics.group_ready(ns, name, ready)
        snapshot = found.snapshot
        if snapshot is not None and snapshot.observation is not None:
            checked = iso_timestamp(snapshot.checked_at)
            if checked is not None:
                self.metrics.group_checked(ns, name, checked)

    async def applying(self, p: GroupPass) -> None:
        """Before the poll task has answered for a new generation: say it is being applied
        (``Reconciling``), so that no GitOps tool reads the old Ready as the new one's. Once
        per generation, and outside the STATUS_MIN_INTERVAL budget: the pass that has the
        answer must not wait behind it."""
        meta = p.meta
        generation = int(meta.get("generation") or 0)
        if self.announced.get(p.key) == generation:
            return  # written already; the cache has not shown it yet
        wanted = st.applying_status(p.group.get("status"), generation, utc_now_iso())
        if wanted is None:
            return
        await self.cluster.patch_group_status(meta["namespace"], meta["name"], wanted)
        self.announced[p.key] = generation

    def _domain(self, key: str, meta: dict[str, Any], previous: dict[str, Any]) -> dict[str, Any]:
        """``status.domain`` and its series while sharded; a merge patch's null removes the
        field once sharding is off (one replica has no domain to show: it serves them all)."""
        if self.placement is None:
            return {"domain": None} if "domain" in previous else {}
        placed = self.placement(key)
        if placed is None:
            return {}
        self.metrics.group_served(meta["namespace"], meta["name"], placed.domain, placed.served_by)
        return {"domain": placed.status()}

    def _waiting(
        self,
        key: str,
        meta: dict[str, Any],
        spec: RunnerGroupSpec,
        snapshot: Snapshot,
        decision: Plan,
        created: int,
        found: Found,
        state: GroupState,
    ) -> dict[str, Any]:
        """``status.waiting`` and ``status.oldestQueuedTime`` (reconcile/why/waiting.py), and the
        same as metrics."""
        assert snapshot.observation is not None
        blocked = self.clock() < state.blocked_until or state.create_error is not None
        held = None
        healthy = found.healthy
        if blocked and healthy["status"] == "False":
            held = HeldBack(healthy["reason"], st.RUNNERS_HEALTHY)
        matching = queued_matching(snapshot.observation, spec.label_names)
        holders = self.ledger.holders(key)
        waiting = explain_waiting(
            own=[j for j in matching if holders.get(j.id, key) == key],
            by_peer=peers_serving(matching, holders, key),
            covered=decision.not_busy + created,
            room=spec.max_active_runners - decision.alive - created,
            held=held,
            listed=matching,
        )
        oldest = waiting.oldest.timestamp() if waiting.oldest is not None else None
        self.why_metrics.waiting(meta["namespace"], meta["name"], waiting.counts(), oldest)
        return {"waiting": waiting.status(), "oldestQueuedTime": waiting.oldest_iso()}

    def _log_transitions(
        self, key: str, ready: dict[str, str], healthy: dict[str, str], state: GroupState
    ) -> None:
        """On-call engineers read logs first: every failure reaches the log at warning level
        when it starts or changes, and again every ``LOG_REMINDER`` while it lasts."""
        bad = [c for c in (ready, healthy) if c["status"] == "False"]
        now = self.clock()
        if not bad:
            if state.logged is not None:
                log.info("group healthy again", group=key)
            state.logged = None
            return
        current = (bad[0]["reason"], bad[0]["message"])
        if state.logged != current or now - state.logged_at >= LOG_REMINDER:
            log.warning(
                "group not working" if state.logged != current else "group still not working",
                group=key,
                condition=bad[0]["type"],
                reason=current[0],
                message=current[1],
            )
            state.logged, state.logged_at = current, now


def _since(problem: Problem | None, since: float | None, now: float) -> float | None:
    """When the Secret problem now reported began (None: there is none)."""
    if problem is None or problem.kind is not ProblemKind.SECRET:
        return None
    return now if since is None else since


def _sooner(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def _domain_only(previous: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether a placement the status shows already is all that changed: a hand-over moves
    thousands of groups at once, and writing each one's ``servedBy`` then was the burst the
    API server felt. The new placement rides on the next write the group needs (the
    ``group_domain_info`` series says it at once); a group placed for the first time, or
    whose domain goes (sharding off), is written now."""
    if not isinstance(previous.get("domain"), dict) or not isinstance(wanted.get("domain"), dict):
        return False
    rest = {k: v for k, v in wanted.items() if k != "domain"}
    return not st.status_differs(previous, rest)
