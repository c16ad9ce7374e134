"""Carries out the reaps a plan proposed, in the group's Gitea task, checking each first.

A plan is computed from a runner list read earlier; in the meantime a runner may have taken
a job. So, just before acting: disable each candidate's registration (Gitea >= 1.26; a
disabled runner takes no new task), then ask Gitea what is running now, and skip a runner
(re-enabling it) that is gone, busy, or named by a job in progress. Only then delete its Job,
and the registration after that, so a runner is never left without its registration while
its Pod still runs.

Every candidate is checked, whatever its kind: one that never registered (startup timeout,
teardown) may have registered since the plan, under the Pod the plan saw or a replacement
Pod the Job started meanwhile (read again from the cache), and taken a job. A pass cut short
(its deadline, the poll task stopping) still re-enables every registration it disabled.

Two signals, because neither suffices alone: Gitea's ``busy`` means "reported task progress
within the last 10 s", which is false between a runner fetching a task and its first report,
and during any pause of its reports; a job ``in_progress`` names its runner from the moment
the task is handed out, for as long as Gitea counts it running. Orphaned registrations are
removed only when their Pod does not exist in the cluster and Gitea says they are idle (and,
outside a teardown, offline).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from gitea_runner_operator.api.gitea import ActionRunner
from gitea_runner_operator.api.observation import Snapshot
from gitea_runner_operator.forge.errors import GiteaError
from gitea_runner_operator.forge.observe import GiteaHandle
from gitea_runner_operator.kit.lograte import LogRate
from gitea_runner_operator.kube.cache import ClusterCache
from gitea_runner_operator.kube.cluster import Cluster
from gitea_runner_operator.objects.views import job_view, pods_by_job
from gitea_runner_operator.reconcile.ports import ReapOrder
from gitea_runner_operator.reconcile.scaling import Orphan, ReapCandidate, ReapReason

log = structlog.get_logger(__name__)

# How long re-enabling what a cut-short pass disabled may take (it runs shielded).
HAND_BACK_TIMEOUT = 15.0
SKIP_LOG_EVERY = 60.0

REASON_TEXT = {
    ReapReason.IDLE: "took no job within spec.idleTimeout",
    ReapReason.IDLE_WITH_DEMAND: "stayed idle for spec.idleTimeout although matching jobs "
    "were queued",
    ReapReason.STARTUP_TIMEOUT: "did not register within spec.startupTimeout",
    ReapReason.GROUP_DELETED: "was not busy and its RunnerGroup is being deleted",
    ReapReason.WARM_RECYCLED: "was a warm runner older than spec.warmRunnerMaxAge (replaced)",
    ReapReason.HANDLE_GONE: "had no queued Forgejo job left to run (its job was cancelled, "
    "re-run or taken)",
}


@dataclass
class ReapOutcome:
    reaped: list[tuple[str, ReapReason]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    deregistered: list[str] = field(default_factory=list)


class Reaper:
    def __init__(
        self,
        cluster: Cluster,
        cache: ClusterCache,
        on_reaped: Callable[[str, str, ReapReason], None] | None = None,
    ) -> None:
        self._cluster = cluster
        self._cache = cache
        self._on_reaped = on_reaped
        self._handing_back: set[asyncio.Task[None]] = set()
        # A busy runner of a draining group is looked at on every poll (every 0.5 s while
        # its group is deleted): one line per runner and state a minute, with the count.
        self._skips = LogRate(SKIP_LOG_EVERY)

    async def run(
        self, key: str, handle: GiteaHandle, snapshot: Snapshot, order: ReapOrder
    ) -> ReapOutcome:
        prepared: list[_Prepared] = []
        try:
            return await self._run(key, handle, snapshot, order, prepared)
        finally:
            # Cut short (the pass's deadline, the poll task stopping) or not: nothing this
            # pass disabled stays disabled. Shielded, so a second cancellation cannot stop
            # it, and bounded by its own timeout.
            left = [p for p in prepared if p.disabled]
            if left:
                task = asyncio.create_task(self._hand_back_bounded(handle, left))
                self._handing_back.add(task)
                task.add_done_callback(self._handing_back.discard)
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(task)

    def _skipped(self, what: str, key: str, candidate: ReapCandidate, state: str) -> None:
        held = self._skips.admit((key, candidate.job_name, state))
        if held is not None:
            log.info(what, group=key, job=candidate.job_name, state=state, held_back=held)

    async def _hand_back_bounded(self, handle: GiteaHandle, prepared: list[_Prepared]) -> None:
        try:
            async with asyncio.timeout(HAND_BACK_TIMEOUT):
                await self._hand_back(handle, prepared)
        except TimeoutError:
            ids = [i for p in prepared for i in p.disabled]
            log.warning("re-enabling runners timed out; they stay disabled", runner_ids=ids)

    async def close(self) -> None:
        """Wait (bounded) for re-enables still running after a cut-short pass."""
        if self._handing_back:
            await asyncio.wait(list(self._handing_back), timeout=HAND_BACK_TIMEOUT)

    async def _run(
        self,
        key: str,
        handle: GiteaHandle,
        snapshot: Snapshot,
        order: ReapOrder,
        prepared: list[_Prepared],
    ) -> ReapOutcome:
        outcome = ReapOutcome()
        fresh = {r.name: r for r in (snapshot.observation.runners if snapshot.observation else ())}
        for candidate in order.candidates:
            try:
                ready = await self._prepare(key, handle, fresh, candidate, prepared)
            except GiteaError as exc:
                log.warning("reap postponed", group=key, job=candidate.job_name, error=str(exc))
                ready = None
            if ready is None:
                outcome.skipped.append(candidate.job_name)
        if not prepared and not order.orphans:
            return outcome
        try:
            working = await self._working(handle)
        except GiteaError as exc:
            log.warning("reaps postponed: jobs in progress unknown", group=key, error=str(exc))
            await self._hand_back(handle, prepared)
            outcome.skipped.extend(p.candidate.job_name for p in prepared)
            return outcome
        for ready in prepared:
            name = ready.candidate.job_name
            try:
                if await self._reap(key, handle, order.group, ready, working):
                    outcome.reaped.append((name, ready.candidate.reason))
                else:
                    outcome.skipped.append(name)
            except GiteaError as exc:
                log.warning("reap postponed", group=key, job=name, error=str(exc))
                outcome.skipped.append(name)
        for orphan in order.orphans:
            try:
                if await self._deregister_orphan(key, handle, orphan, working):
                    outcome.deregistered.append(orphan.name)
            except GiteaError as exc:
                log.warning("orphan removal postponed", group=key, error=str(exc))
        return outcome

    def _pod_names(self, key: str, candidate: ReapCandidate) -> tuple[str, ...]:
        """The candidate's Pods as the plan saw them and as the cache shows them now (a Job
        may have replaced its Pod since: the new one registers under its own name)."""
        now = pods_by_job(self._cache.runner_pods(key)).get(candidate.job_name, [])
        names = [p["metadata"]["name"] for p in now]
        return tuple(dict.fromkeys([*candidate.pod_names, *names]))

    def _job_alive(self, key: str, job_name: str) -> bool:
        jobs = [j for j in self._cache.runner_jobs(key) if j["metadata"]["name"] == job_name]
        return bool(jobs) and job_view(jobs[0], []).alive

    def _job_still_reapable(self, key: str, job_name: str) -> bool:
        """The cluster's view now: the Job exists, is alive and has not taken a job."""
        jobs = [j for j in self._cache.runner_jobs(key) if j["metadata"]["name"] == job_name]
        if not jobs:
            return False
        pods = pods_by_job(self._cache.runner_pods(key)).get(job_name, [])
        view = job_view(jobs[0], pods)
        return view.alive and not view.took_job

    async def _prepare(
        self,
        key: str,
        handle: GiteaHandle,
        fresh: dict[str, ActionRunner],
        candidate: ReapCandidate,
        prepared: list[_Prepared],
    ) -> _Prepared | None:
        """Disable the candidate's registrations, so that none takes a task from now on."""
        if not self._job_still_reapable(key, candidate.job_name):
            return None
        # Forgejo: a runner registers under its Job's name.
        pod_names = (*self._pod_names(key, candidate), candidate.job_name)
        registered = [fresh[p] for p in pod_names if p in fresh]
        if candidate.reason is ReapReason.STARTUP_TIMEOUT and registered:
            return None  # it registered since: it gets its own idle time now
        ready = _Prepared(
            candidate,
            tuple(sorted({r.id for r in registered} | set(candidate.runner_ids))),
            pod_names=pod_names,
        )
        prepared.append(ready)  # before the first disable: a cut-short pass hands it back
        for runner_id in ready.runner_ids:
            try:
                after = await handle.client.set_runner_disabled(handle.scope, runner_id, True)
            except GiteaError:
                await self._hand_back(handle, [ready])
                prepared.remove(ready)
                raise
            if after is not None:
                ready.disabled.append(runner_id)
        return ready

    async def _working(self, handle: GiteaHandle) -> _Working:
        """Who Gitea says is running a job now, read after every candidate was disabled."""
        listing = await handle.client.list_jobs(handle.scope, "in_progress")
        return _Working(
            complete=listing.complete,
            ids=frozenset(j.runner_id for j in listing.items if j.runner_id),
            names=frozenset(j.runner_name for j in listing.items if j.runner_name),
        )

    async def _hand_back(self, handle: GiteaHandle, prepared: list[_Prepared]) -> None:
        """Re-enable what we disabled: the runner is not ours to reap after all."""
        for ready in prepared:
            for runner_id in ready.disabled:
                try:
                    await handle.client.set_runner_disabled(handle.scope, runner_id, False)
                except GiteaError as exc:
                    log.warning("re-enabling a runner failed", runner_id=runner_id, error=str(exc))
            ready.disabled.clear()

    async def _reap(
        self,
        key: str,
        handle: GiteaHandle,
        group: dict[str, Any],
        ready: _Prepared,
        working: _Working,
    ) -> bool:
        candidate = ready.candidate
        if not self._job_still_reapable(key, candidate.job_name):
            await self._hand_back(handle, [ready])
            return False
        # Every kind of candidate, registered or not: a job in progress that names one of
        # its Pods (or a listing that may have missed one) means it is working.
        pod_names = tuple(dict.fromkeys([*ready.pod_names, *self._pod_names(key, candidate)]))
        running = next((p for p in pod_names if p in working.names), None)
        if running is not None or not working.complete:
            await self._hand_back(handle, [ready])
            why = "running a job" if running else "jobs in progress not fully listed"
            self._skipped("reap skipped: the runner may be running a job", key, candidate, why)
            return False
        for runner_id in ready.runner_ids:
            try:
                current = await handle.client.get_runner(handle.scope, runner_id)
            except GiteaError:
                await self._hand_back(handle, [ready])  # never leave it disabled on a failure
                raise
            state = _not_idle(current, working, pod_alive=True)
            if state is not None:
                # It took a job between the plan and now, or Gitea removed it after its one
                # job: either way the runner is not idle. Leave it alone.
                await self._hand_back(handle, [ready])
                self._skipped("reap skipped: the runner is no longer idle", key, candidate, state)
                return False
        namespace = group["metadata"]["namespace"]
        deleted = await self._cluster.delete_job(namespace, candidate.job_name)
        for runner_id in ready.runner_ids:
            await handle.client.delete_runner(handle.scope, runner_id)
        ready.disabled.clear()  # deleted, not to be re-enabled
        if not deleted:
            return False
        text = REASON_TEXT[candidate.reason]
        log.info("reaped runner", group=key, job=candidate.job_name, reason=candidate.reason.value)
        await self._cluster.emit_event(
            group, "Normal", "RunnerReaped", f"Deleted runner Job {candidate.job_name}: it {text}"
        )
        if self._on_reaped is not None:
            self._on_reaped(key, candidate.job_name, candidate.reason)
        return True

    async def _deregister_orphan(
        self, key: str, handle: GiteaHandle, orphan: Orphan, working: _Working
    ) -> bool:
        pods = {p["metadata"]["name"] for p in self._cache.runner_pods(key)}
        if orphan.name in pods or self._job_alive(key, orphan.name):
            return False  # its Pod (or, for Forgejo, its runner Job) exists: not an orphan
        current = await handle.client.get_runner(handle.scope, orphan.runner_id)
        if current is None or current.name != orphan.name:
            return False
        if current.online and orphan.require_offline:
            return False
        # An offline runner runs nothing, whatever job Gitea has not yet timed out for it.
        if _not_idle(current, working, pod_alive=current.online) is not None:
            return False
        removed = await handle.client.delete_runner(handle.scope, orphan.runner_id)
        if removed:
            log.info("removed leftover registration", group=key, runner=orphan.name)
        return removed


@dataclass
class _Prepared:
    """A candidate whose registrations are disabled, awaiting the final check."""

    candidate: ReapCandidate
    runner_ids: tuple[int, ...]
    disabled: list[int] = field(default_factory=list)
    pod_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Working:
    """Runners named by jobs in progress. ``complete`` is False when the listing hit the page
    cap: a runner not named may then still be working."""

    complete: bool
    ids: frozenset[int]
    names: frozenset[str]


def _not_idle(current: ActionRunner | None, working: _Working, *, pod_alive: bool) -> str | None:
    """Why a registration must not be removed now, or None when it is provably idle."""
    if current is None:
        return "gone"
    if current.busy:
        return "busy"
    if pod_alive and (current.id in working.ids or current.name in working.names):
        return "running a job"
    if pod_alive and not working.complete:
        return "jobs in progress not fully listed"
    return None
