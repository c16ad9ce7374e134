"""Gives each suspended runner Job of a Forgejo group its own registration, and a job.

Runs in the group's poll task (the only place that talks to its forge), after each
observation. For every runner Job the reconciler created suspended (objects/forgejo_job.py):

1. choose the job it is for: the oldest waiting job of the observation that the group's
   labels can run and that no runner Job of any group is bound to yet (handles are UUIDs,
   unique per instance). None left: the Job stays suspended (no Pod, no registration) and
   is bound once one is queued, or is reaped as never started. With ``minIdleRunners`` it is
   enrolled unbound instead (``one-job`` without ``--handle``: a warm runner takes any job);
2. ``POST …/actions/runners {name: <Job name>, ephemeral: true}`` for its own uuid and token;
3. record the registration's id and the handle on the Job (annotations), so nothing but the
   cluster is needed to find it again (reaping, teardown, a restarted operator);
4. create the Secret named like the Job, owned by it, with uuid, token and handle;
5. resume the Job: now its Pod can start.

A failure after step 2 deletes the registration again. A registration whose answer was
lost (a POST is never retried) may exist all the same: before registering a Job, one named
like it in the observation (which lists the scope's runners) is deleted first, since its token
was never stored and no runner can ever use it. A Job found suspended *with* a
registration id (an earlier pass was cut off between 3 and 5) cannot be completed, because
the token is shown only once: its registration and the Job are deleted, and the count
creates a new one. Jobs enrolled by this process are remembered until the cache shows
them resumed, so a slow watch never gets a Job two registrations.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import structlog

from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.naming import GroupKey
from gitea_runner_operator.api.observation import Snapshot
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.forge.errors import GiteaError
from gitea_runner_operator.forge.observe import GiteaHandle
from gitea_runner_operator.kube.cache import ClusterCache
from gitea_runner_operator.kube.cluster import Cluster
from gitea_runner_operator.kube.runner_credentials import (
    RunnerCredentials,
    SecretExists,
    credentials_secret,
)
from gitea_runner_operator.objects.forgejo_job import (
    FORGE_ANNOTATION,
    HANDLE_ANNOTATION,
    HANDLE_KEY,
    RUNNER_ID_ANNOTATION,
    TOKEN_KEY,
    UUID_KEY,
)
from gitea_runner_operator.objects.views import job_finished, job_suspended
from gitea_runner_operator.reconcile.scaling import queued_matching

log = structlog.get_logger(__name__)

# Registrations per pass: bounds one pass's time; the rest follow on the next observation.
MAX_PER_PASS = 20


@dataclass
class EnrollOutcome:
    enrolled: list[tuple[str, str]] = field(default_factory=list)  # (Job, handle or "")
    abandoned: list[str] = field(default_factory=list)


def waiting_for_enrollment(job: dict[str, Any]) -> bool:
    meta = job["metadata"]
    return (
        (meta.get("annotations") or {}).get(FORGE_ANNOTATION) == "forgejo"
        and job_suspended(job)
        and not meta.get("deletionTimestamp")
        and not job_finished(job)
    )


def bound_handle(job: dict[str, Any]) -> str:
    return str((job["metadata"].get("annotations") or {}).get(HANDLE_ANNOTATION) or "")


def choose(waiting: Iterable[ActionJob], taken: set[str]) -> ActionJob | None:
    """The oldest waiting job no runner is bound to. A job without a handle (created before
    Forgejo 15) can be bound by no one: an unbound runner is made for it."""
    for job in sorted(waiting, key=lambda j: j.id):
        if not job.handle or job.handle not in taken:
            return job
    return None


class Enroller:
    def __init__(
        self,
        cluster: Cluster,
        cache: ClusterCache,
        credentials: RunnerCredentials,
        *,
        max_per_pass: int = MAX_PER_PASS,
    ) -> None:
        self._cluster = cluster
        self._cache = cache
        self._credentials = credentials
        self._max = max_per_pass
        self._enrolled: dict[str, set[str]] = {}

    def bound_handles(self) -> set[str]:
        """Handles some alive runner Job (of any group) is bound to."""
        taken: set[str] = set()
        for key in self._cache.group_keys():
            for job in self._cache.runner_jobs(key):
                if not job_finished(job) and (handle := bound_handle(job)):
                    taken.add(handle)
        return taken

    def forget(self, key: str) -> None:
        self._enrolled.pop(key, None)

    def knows(self, key: str) -> bool:
        return key in self._enrolled

    async def run(
        self, key: str, handle: GiteaHandle, snapshot: Snapshot, spec: RunnerGroupSpec
    ) -> EnrollOutcome:
        outcome = EnrollOutcome()
        forgejo = handle.forgejo
        if forgejo is None or snapshot.observation is None:
            return outcome
        group = self._cache.group(key)
        if group is None or group["metadata"].get("deletionTimestamp"):
            return outcome  # a group being torn down starts no runner
        jobs = self._cache.runner_jobs(key)
        done = self._enrolled.setdefault(key, set())
        done &= {j["metadata"]["name"] for j in jobs if waiting_for_enrollment(j)}
        pending = [
            j for j in jobs if waiting_for_enrollment(j) and j["metadata"]["name"] not in done
        ]
        if not pending:
            return outcome
        waiting = list(queued_matching(snapshot.observation, spec.label_names))
        taken = self.bound_handles()
        registered = {r.name: r.id for r in snapshot.observation.runners}
        namespace, group_name = GroupKey.parse(key)
        for job in sorted(pending, key=lambda j: j["metadata"].get("creationTimestamp") or "")[
            : self._max
        ]:
            name = job["metadata"]["name"]
            annotations = job["metadata"].get("annotations") or {}
            if RUNNER_ID_ANNOTATION in annotations:
                await self._abandon(key, handle, namespace, name, annotations[RUNNER_ID_ANNOTATION])
                outcome.abandoned.append(name)
                done.add(name)
                continue
            if name in registered:
                try:
                    await self._drop_lost(key, handle, name, registered.pop(name))
                except GiteaError as exc:
                    log.warning("runner registration postponed", group=key, job=name,
                                error=str(exc))  # fmt: skip
                    break
            chosen = choose(waiting, taken)
            if chosen is None and spec.min_idle_runners == 0:
                continue  # stays suspended until a job it can be bound to is queued
            job_handle = chosen.handle if chosen is not None else ""
            try:
                await self._enroll(key, handle, namespace, group_name, job, job_handle)
            except GiteaError as exc:
                log.warning("runner registration postponed", group=key, job=name, error=str(exc))
                break  # the forge is failing: the next observation tries again
            done.add(name)
            outcome.enrolled.append((name, job_handle))
            if chosen is not None:
                waiting.remove(chosen)
                if chosen.handle:
                    taken.add(chosen.handle)
        return outcome

    async def _enroll(
        self,
        key: str,
        handle: GiteaHandle,
        namespace: str,
        group_name: str,
        job: dict[str, Any],
        job_handle: str,
    ) -> None:
        forgejo = handle.forgejo
        assert forgejo is not None
        name = job["metadata"]["name"]
        registered = await forgejo.register_runner(
            handle.scope, name, description=f"gitea-runner-operator {key}"
        )
        try:
            await self._cluster.annotate_job(
                namespace,
                name,
                {RUNNER_ID_ANNOTATION: str(registered.id), HANDLE_ANNOTATION: job_handle},
            )
            data = {UUID_KEY: registered.uuid, TOKEN_KEY: registered.token}
            if job_handle:
                data[HANDLE_KEY] = job_handle
            await self._credentials.create_secret(
                credentials_secret(namespace, job, data, group_name)
            )
            if not await self._credentials.resume_job(namespace, name):
                raise LookupError(f"Job {namespace}/{name} is gone")
        except Exception as exc:
            log.warning("runner enrollment failed; registration removed", group=key, job=name,
                        error=type(exc).__name__)  # fmt: skip
            try:
                await forgejo.delete_runner(handle.scope, registered.id)
            except GiteaError:
                log.warning("could not remove the registration", group=key, runner_id=registered.id)
            if isinstance(exc, SecretExists):
                await self._cluster.delete_job(namespace, name)
                return
            raise
        log.info("runner registered", group=key, job=name, runner_id=registered.id,
                 bound=bool(job_handle))  # fmt: skip

    async def _drop_lost(self, key: str, handle: GiteaHandle, name: str, runner_id: int) -> None:
        """A registration named like a Job that has none recorded: an earlier POST was done
        but its answer (the only copy of the token) was lost."""
        forgejo = handle.forgejo
        assert forgejo is not None
        await forgejo.delete_runner(handle.scope, runner_id)
        log.info("removed a registration whose answer was lost", group=key, job=name,
                 runner_id=runner_id)  # fmt: skip

    async def _abandon(
        self, key: str, handle: GiteaHandle, namespace: str, name: str, raw_id: str
    ) -> None:
        forgejo = handle.forgejo
        assert forgejo is not None
        if raw_id.isdigit():
            try:
                await forgejo.delete_runner(handle.scope, int(raw_id))
            except GiteaError as exc:
                log.warning("could not remove a registration", group=key, error=str(exc))
                return
        await self._cluster.delete_job(namespace, name)
        log.info("deleted a runner Job whose enrollment was cut off", group=key, job=name)
