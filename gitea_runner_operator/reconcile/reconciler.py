"""Reconcile one RunnerGroup: read the cache and a fresh-enough Gitea snapshot, decide with
the pure :func:`~gitea_runner_operator.reconcile.scaling.plan`, act, write status.

Like controller-runtime's Reconcile, it takes a key, trusts no event payload, and is safe to
run any number of times: every decision is recomputed from what the cluster and Gitea say now.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from gitea_runner_operator.api import constants
from gitea_runner_operator.api.labels import label_names
from gitea_runner_operator.api.runnergroup import InvalidSpec, RunnerGroupSpec, parse_spec
from gitea_runner_operator.forge.errors import GiteaError
from gitea_runner_operator.kube.cache import ClusterCache
from gitea_runner_operator.kube.cluster import Cluster
from gitea_runner_operator.kube.job_template import render_runner_job
from gitea_runner_operator.kube.views import RunnerJobView, job_view, pods_by_job
from gitea_runner_operator.reconcile.scaling import Plan, group_registrations, plan
from gitea_runner_operator.reconcile.status import (
    READY,
    RUNNERS_HEALTHY,
    Problem,
    desired_status,
    find_condition,
    ready_condition,
    runners_healthy_condition,
    status_differs,
)
from gitea_runner_operator.runtime.expectations import Expectations
from gitea_runner_operator.runtime.observer import Snapshot, utc_now_iso
from gitea_runner_operator.runtime.poller import Pollers

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Result:
    requeue_after: float | None = None


class Reconciler:
    def __init__(
        self,
        cache: ClusterCache,
        cluster: Cluster,
        pollers: Pollers,
        expectations: Expectations,
        *,
        min_refresh_interval: float = 2.0,
        job_ttl_seconds: int = 600,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._cache = cache
        self._cluster = cluster
        self._pollers = pollers
        self._expectations = expectations
        self._min_refresh = min_refresh_interval
        self._job_ttl = job_ttl_seconds
        self._clock = clock
        self._wall = wall_clock

    async def reconcile(self, key: str) -> Result:
        group = self._cache.group(key)
        if group is None:
            await self._forget_registrations(key)
            await self._pollers.stop(key)
            self._expectations.forget(key)
            return Result()
        if group["metadata"].get("deletionTimestamp"):
            return Result()  # held by someone's finalizer: start nothing, wait for the end
        logger = log.bind(group=key)
        views = self._job_views(key)
        alive = sum(1 for v in views if v.alive)
        try:
            spec = parse_spec(group.get("spec"))
        except InvalidSpec as exc:
            await self._pollers.stop(key)
            logger.warning("invalid RunnerGroup", error=exc.message)
            await self._write_status(
                group, Problem("InvalidSpec", exc.message), active=alive, max_active=0
            )
            return Result()

        poller = await self._pollers.ensure(key, spec)
        changed = self._cache.changed_at(key)
        latest = poller.latest
        if latest is not None and latest.problem is None and latest.started_at <= changed:
            age = self._clock() - latest.started_at
            if age < self._min_refresh:  # the cluster is churning: ask Gitea at most this often
                return Result(requeue_after=self._min_refresh - age)
        snapshot = (
            await poller.refresh(newer_than=changed)
            if latest is None or latest.problem is None
            else latest  # failing groups are retried by the poller's backoff, not by events
        )
        if snapshot.problem is not None or snapshot.observation is None:
            problem = snapshot.problem or Problem("GiteaError", "no observation")
            active = alive + self._expectations.pending(key)
            await self._write_status(
                group, problem, active=active, max_active=0, target=spec.target
            )
            return Result()

        decision = plan(
            group_name=group["metadata"]["name"],
            jobs=views,
            observation=snapshot.observation,
            offered=label_names(spec.runner_labels),
            max_active=spec.max_active_runners,
            idle_timeout=spec.idle_timeout_seconds,
            now=self._wall(),
            pending_creations=self._expectations.pending(key),
        )
        created = await self._act(key, group, spec, snapshot, decision)
        active = decision.alive + created - len(decision.reap)
        await self._write_status(
            group,
            None,
            active=active,
            max_active=spec.max_active_runners,
            queued=decision.demand,
            checked_at=snapshot.checked_at,
            target=spec.target,
            failed_jobs=[v.name for v in views if v.failed],
        )
        return Result()

    async def _forget_registrations(self, key: str) -> None:
        """The group is gone: the garbage collector deletes its Jobs and Pods, but Gitea keeps
        the registrations of runners that never took a job. Remove them with the group's last
        known credentials. Best effort: a group deleted while the operator was down, or whose
        Secret went with it, leaves them to the Gitea admin."""
        poller = self._pollers.get(key)
        snapshot = poller.latest if poller is not None else None
        if snapshot is None or snapshot.client is None or snapshot.scope is None:
            return
        try:
            runners = await snapshot.client.list_runners(snapshot.scope)
            for runner in group_registrations(key.split("/", 1)[1], runners.items):
                await snapshot.client.delete_runner(snapshot.scope, runner.id)
                log.info("removed registration of deleted group", group=key, runner=runner.name)
        except GiteaError as exc:
            log.warning(
                "could not remove the deleted group's registrations", group=key, error=str(exc)
            )

    def _job_views(self, key: str) -> list[RunnerJobView]:
        pods = pods_by_job(self._cache.runner_pods(key))
        return [
            job_view(job, pods.get(job["metadata"]["name"], []))
            for job in self._cache.runner_jobs(key)
        ]

    async def _act(
        self,
        key: str,
        group: dict[str, Any],
        spec: RunnerGroupSpec,
        snapshot: Snapshot,
        decision: Plan,
    ) -> int:
        meta = group["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        logger = log.bind(group=key)

        for job_name in decision.mark_took_job:
            await self._cluster.annotate_job(
                namespace, job_name, {constants.TOOK_JOB_ANNOTATION: "true"}
            )

        if snapshot.client is not None and snapshot.scope is not None:
            for runner_id in decision.deregister:
                try:
                    await snapshot.client.delete_runner(snapshot.scope, runner_id)
                    logger.info("removed runner registration", runner_id=runner_id)
                except GiteaError as exc:
                    logger.warning("could not remove runner registration", error=str(exc))

        for job_name in decision.reap:
            if await self._cluster.delete_job(namespace, job_name):
                logger.info("reaped idle runner", job=job_name, idle_timeout=spec.idle_timeout)
                await self._cluster.emit_event(
                    group,
                    "Normal",
                    "RunnerReaped",
                    f"Deleted runner Job {job_name}: no job taken within {spec.idle_timeout}",
                )

        if decision.create <= 0:
            return 0
        manifest = render_runner_job(
            group_name=name,
            namespace=namespace,
            group_uid=meta["uid"],
            spec=spec,
            ttl_seconds_after_finished=self._job_ttl,
        )
        results = await asyncio.gather(
            *(self._cluster.create_job(manifest) for _ in range(decision.create)),
            return_exceptions=True,
        )
        created = [r for r in results if isinstance(r, str)]
        for job_name in created:
            self._expectations.expect(key, job_name)
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
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise failures[0]
        return len(created)

    async def _write_status(
        self,
        group: dict[str, Any],
        problem: Problem | None,
        *,
        active: int,
        max_active: int,
        queued: int | None = None,
        checked_at: str | None = None,
        target: str | None = None,
        failed_jobs: list[str] | None = None,
    ) -> None:
        meta = group["metadata"]
        previous = group.get("status") or {}
        ready = ready_condition(problem, demand=queued or 0, alive=active, max_active=max_active)
        healthy = runners_healthy_condition(failed_jobs) if failed_jobs is not None else None
        wanted = desired_status(
            previous=previous,
            generation=int(meta.get("generation") or 0),
            active=active,
            queued=queued,
            last_check_time=checked_at,
            ready=ready,
            now_iso=utc_now_iso(),
            target=target,
            extra_conditions=[healthy] if healthy is not None else [],
        )
        if not status_differs(previous, wanted):
            return
        await self._cluster.patch_group_status(meta["namespace"], meta["name"], wanted)
        # Events mark transitions, not every pass.
        if problem is not None and find_condition(previous, READY).get("reason") != problem.reason:
            await self._cluster.emit_event(group, "Warning", problem.reason, problem.message)
        was_healthy = find_condition(previous, RUNNERS_HEALTHY).get("status") != "False"
        if healthy is not None and healthy["status"] == "False" and was_healthy:
            await self._cluster.emit_event(group, "Warning", healthy["reason"], healthy["message"])
