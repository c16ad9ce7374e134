"""Decisions that exist only for Forgejo groups, as pure functions.

- **Stale bindings.** A runner Job bound to a job's handle (poll/enroll.py) runs
  ``one-job --handle H --wait``: if H no longer names a waiting job (cancelled, re-run under
  a new handle, finished), the runner waits forever. Such a runner is proposed for reaping
  (the poll task re-reads its registration first and leaves it alone if Forgejo says it is
  active). A handle that is *running* is left alone: most likely this runner took it; if
  another runner did, ours idles and is reaped after ``idleTimeout`` like any idle runner.
  Nothing is proposed from an incomplete runner list.
- **Status.** ``status.forge`` says which forge answered and its version.
- **Webhooks.** Forgejo has no ``workflow_job`` event: nothing signals a queued job, so a
  Forgejo group is polled only and the operator never creates a hook there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gitea_runner_operator.api.forge import ForgeInfo
from gitea_runner_operator.api.hooks import HookStatus
from gitea_runner_operator.api.observation import Observation, Snapshot
from gitea_runner_operator.objects.forgejo_job import HANDLE_ANNOTATION
from gitea_runner_operator.objects.views import RunnerJobView
from gitea_runner_operator.reconcile.scaling import ReapCandidate, ReapReason, RunnerState

NO_JOB_EVENTS = HookStatus(
    False,
    "ForgejoHasNoJobEvents",
    "Forgejo has no workflow_job webhook event, so nothing signals a queued job: this group "
    "is polled every spec.pollInterval and no hook is created (spec.webhook is ignored)",
)


def forge_of(snapshot: Snapshot | None) -> ForgeInfo | None:
    if snapshot is None or snapshot.observation is None:
        return None
    return snapshot.observation.forge


def is_forgejo(snapshot: Snapshot | None) -> bool:
    forge = forge_of(snapshot)
    return forge is not None and forge.is_forgejo


def forge_status(forge: ForgeInfo | None, previous: Mapping[str, Any]) -> dict[str, str] | None:
    """``status.forge``: the latest detection, else what the status said before."""
    if forge is None:
        known = previous.get("forge")
        return dict(known) if isinstance(known, Mapping) else None
    status = {"flavor": forge.flavor.value}
    if forge.version:
        status["version"] = forge.version[:64]
    return status


def job_handles(jobs: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Job name -> the handle its runner is bound to (only bound Jobs)."""
    out: dict[str, str] = {}
    for job in jobs:
        meta = job.get("metadata") or {}
        handle = (meta.get("annotations") or {}).get(HANDLE_ANNOTATION)
        if handle:
            out[str(meta["name"])] = str(handle)
    return out


def stale_bindings(
    views: Sequence[RunnerJobView],
    handles: Mapping[str, str],
    states: Mapping[str, RunnerState],
    observation: Observation,
    runner_ids: Mapping[str, tuple[int, ...]],
) -> list[ReapCandidate]:
    """Runners bound to a handle that is neither waiting nor running any more."""
    if not observation.runners_complete:
        return []
    alive_handles = {j.handle for j in (*observation.queued, *observation.in_progress) if j.handle}
    out = []
    for view in views:
        handle = handles.get(view.name)
        if not handle or handle in alive_handles:
            continue
        if states.get(view.name) not in (RunnerState.STARTING, RunnerState.IDLE):
            continue
        out.append(
            ReapCandidate(
                view.name, ReapReason.HANDLE_GONE, view.pod_names, runner_ids.get(view.name, ())
            )
        )
    return out


def surplus_suspended(
    views: Sequence[RunnerJobView],
    states: Mapping[str, RunnerState],
    *,
    demand: int,
    not_busy: int,
    min_idle: int,
) -> list[ReapCandidate]:
    """Suspended runner Jobs beyond what the queue needs (their job went before they were
    enrolled): deleted at once, youngest first. They have no Pod and no registration, so
    nothing is lost, and they are not "stuck" runners to back off for."""
    extra = not_busy - demand - min_idle
    if extra <= 0:
        return []
    idle = [v for v in views if v.suspended and states.get(v.name) is RunnerState.STARTING]
    idle.sort(key=lambda v: v.created_at, reverse=True)
    return [ReapCandidate(v.name, ReapReason.HANDLE_GONE, (), ()) for v in idle[:extra]]
