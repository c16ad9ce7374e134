"""Carries out the reaps a plan proposed, in the group's Gitea task, checking each first.

A plan is computed from a runner list read earlier; in the meantime a runner may have taken
a job. So, for each idle runner, just before acting: disable its registration (Gitea >= 1.26;
a disabled runner takes no new task), read it again, and skip it (re-enabling it) if it is
busy or gone. Only then delete its Job, and the registration after that, so a runner is never
left without its registration while its Pod still runs. Orphaned registrations are removed
only when their Pod does not exist in the cluster and Gitea says they are offline and idle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from gitea_runner_operator.api.gitea import ActionRunner
from gitea_runner_operator.api.observation import Snapshot
from gitea_runner_operator.forge.errors import GiteaError
from gitea_runner_operator.kube.cache import ClusterCache
from gitea_runner_operator.kube.cluster import Cluster
from gitea_runner_operator.kube.views import job_view, pods_by_job
from gitea_runner_operator.reconcile.ports import ReapOrder
from gitea_runner_operator.reconcile.scaling import Orphan, ReapCandidate, ReapReason
from gitea_runner_operator.runtime.observer import GiteaHandle

log = structlog.get_logger(__name__)

REASON_TEXT = {
    ReapReason.IDLE: "took no job within spec.idleTimeout",
    ReapReason.IDLE_WITH_DEMAND: "stayed idle for spec.idleTimeout although matching jobs "
    "were queued",
    ReapReason.STARTUP_TIMEOUT: "did not register within spec.startupTimeout",
    ReapReason.GROUP_DELETED: "was not busy and its RunnerGroup is being deleted",
    ReapReason.WARM_RECYCLED: "was a warm runner older than spec.warmRunnerMaxAge (replaced)",
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

    async def run(
        self, key: str, handle: GiteaHandle, snapshot: Snapshot, order: ReapOrder
    ) -> ReapOutcome:
        outcome = ReapOutcome()
        fresh = {r.name: r for r in (snapshot.observation.runners if snapshot.observation else ())}
        for candidate in order.candidates:
            try:
                if await self._reap(key, handle, fresh, order.group, candidate):
                    outcome.reaped.append((candidate.job_name, candidate.reason))
                else:
                    outcome.skipped.append(candidate.job_name)
            except GiteaError as exc:
                log.warning("reap postponed", group=key, job=candidate.job_name, error=str(exc))
                outcome.skipped.append(candidate.job_name)
        for orphan in order.orphans:
            try:
                if await self._deregister_orphan(key, handle, orphan):
                    outcome.deregistered.append(orphan.name)
            except GiteaError as exc:
                log.warning("orphan removal postponed", group=key, error=str(exc))
        return outcome

    def _job_still_reapable(self, key: str, job_name: str) -> bool:
        """The cluster's view now: the Job exists, is alive and has not taken a job."""
        jobs = [j for j in self._cache.runner_jobs(key) if j["metadata"]["name"] == job_name]
        if not jobs:
            return False
        pods = pods_by_job(self._cache.runner_pods(key)).get(job_name, [])
        view = job_view(jobs[0], pods)
        return view.alive and not view.took_job

    async def _reap(
        self,
        key: str,
        handle: GiteaHandle,
        fresh: dict[str, ActionRunner],
        group: dict[str, Any],
        candidate: ReapCandidate,
    ) -> bool:
        if not self._job_still_reapable(key, candidate.job_name):
            return False
        registered = [fresh[p] for p in candidate.pod_names if p in fresh]
        if candidate.reason is ReapReason.STARTUP_TIMEOUT and registered:
            return False  # it registered since: it gets its own idle time now
        ids = {r.id for r in registered} | set(candidate.runner_ids)
        disabled: list[int] = []
        for runner_id in sorted(ids):
            after = await handle.client.set_runner_disabled(handle.scope, runner_id, True)
            if after is not None:
                disabled.append(runner_id)
            current = await handle.client.get_runner(handle.scope, runner_id)
            if current is None or current.busy:
                # Busy: it took a job between the plan and now. Gone: Gitea removed it after
                # its one job. Either way the runner is not idle: leave it alone.
                for rid in disabled:
                    await handle.client.set_runner_disabled(handle.scope, rid, False)
                log.info(
                    "reap skipped: the runner is no longer idle",
                    group=key,
                    job=candidate.job_name,
                    state="gone" if current is None else "busy",
                )
                return False
        namespace = group["metadata"]["namespace"]
        deleted = await self._cluster.delete_job(namespace, candidate.job_name)
        for runner_id in sorted(ids):
            await handle.client.delete_runner(handle.scope, runner_id)
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

    async def _deregister_orphan(self, key: str, handle: GiteaHandle, orphan: Orphan) -> bool:
        pods = {p["metadata"]["name"] for p in self._cache.runner_pods(key)}
        if orphan.name in pods:
            return False  # its Pod exists: not an orphan
        current = await handle.client.get_runner(handle.scope, orphan.runner_id)
        if current is None or current.busy or current.name != orphan.name:
            return False
        if current.online and orphan.require_offline:
            return False
        removed = await handle.client.delete_runner(handle.scope, orphan.runner_id)
        if removed:
            log.info("removed leftover registration", group=key, runner=orphan.name)
        return removed
