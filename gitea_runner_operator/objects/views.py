"""Plain-data views of the cluster objects the decisions read.

The informer caches hold raw API dicts (camelCase, exactly as the API server sends them);
these functions reduce them to what the scaling rule needs, so the rule never touches a dict.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gitea_runner_operator.api import constants
from gitea_runner_operator.api.pod_template import RUNNER_CONTAINER

SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
# Waiting reasons that do not heal by themselves: the Pod will never run the runner.
STUCK_WAITING_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        # imagePullPolicy Never and the image is not on the node (a real kubelet's reason)
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "CrashLoopBackOff",
    }
)


@dataclass(frozen=True, slots=True)
class RunnerJobView:
    """One runner Job and what we know of its Pods."""

    name: str
    created_at: float
    finished: bool
    deleting: bool
    took_job: bool
    pod_names: tuple[str, ...] = ()
    failed: bool = False
    # When the runner container of a live Pod started running (wall clock), if it has.
    started_at: float | None = None
    # Why its Pod cannot start (the Pod's own reason and message), if it is stuck.
    pod_problem: str | None = None
    # Since when a Pod of it has been unschedulable (wall clock), if one is.
    unschedulable_since: float | None = None
    # Names of every Pod of it that still exists, whatever its phase.
    all_pod_names: tuple[str, ...] = ()
    # Live Pods that do not yet carry the node scale-down guards (set once busy).
    unguarded_pods: tuple[str, ...] = ()
    # Suspended (a Forgejo runner Job waiting for its credentials): no Pod on purpose.
    suspended: bool = False
    # Since when a Pod of it has been on its node without a sandbox (wall clock), if one is.
    sandbox_missing_since: float | None = None

    @property
    def alive(self) -> bool:
        return not (self.finished or self.deleting)


def slots_held(views: Iterable[RunnerJobView], pending: int = 0) -> int:
    """Runners that count against ``maxActiveRunners``: the live runner Jobs and the
    ``pending`` ones being created (not in the cache yet). The one rule for "alive": status,
    the family's claims and the scaling plan all count it here, so they never disagree."""
    return sum(1 for v in views if v.alive) + pending


def parse_time(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def job_finished(job: Mapping[str, Any], kinds: tuple[str, ...] = ("Complete", "Failed")) -> bool:
    """Complete or Failed, by the Job's conditions (the Job controller's verdict)."""
    status = job.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") in kinds and cond.get("status") == "True":
            return True
    return False


def runner_exited(pods: Iterable[Mapping[str, Any]]) -> bool:
    """A Pod of the Job succeeded: the runner exited after its one job, and a runner Job
    needs one completion, so the Job controller will only mark it Complete. Counted as
    finished from here: under load the Job controller takes seconds (p90 15 s measured)
    to write that condition, and the slot is free the moment the runner exits. A failed
    Pod is not the end (the Job may retry it: ``backoffLimit``)."""
    return any((p.get("status") or {}).get("phase") == "Succeeded" for p in pods)


def _live(pod: Mapping[str, Any]) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get(
        "phase"
    ) not in ("Succeeded", "Failed")


def runner_status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The runner container's status (the only container's, if it has another name)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for status in statuses:
        if status.get("name") == RUNNER_CONTAINER:
            return status  # type: ignore[no-any-return]
    return statuses[0] if len(statuses) == 1 else {}


def pod_started_at(pod: Mapping[str, Any]) -> float | None:
    """When the runner container started running: idle time counts from here, not from the
    Job's creation, so a Pod that waited for a node is not reaped the moment it starts."""
    running = (runner_status(pod).get("state") or {}).get("running") or {}
    return parse_time(running.get("startedAt"))


def pod_problem(pod: Mapping[str, Any]) -> str | None:
    """The Pod's own reason for not running its runner, when it is one that will not heal.

    Init containers first: host mode's ``gro-register`` and the DinD sidecar start before the
    runner, and while one of them is stuck the runner container only says PodInitializing."""
    status_of = pod.get("status") or {}
    statuses = [
        *(status_of.get("initContainerStatuses") or []),
        *(status_of.get("containerStatuses") or []),
    ]
    for status in statuses:
        waiting = (status.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason in STUCK_WAITING_REASONS:
            # A container that exits at once says why in its termination message (the
            # dind-userns daemon names what the node lacks); the back-off's own says less.
            last = (status.get("lastState") or {}).get("terminated") or {}
            message = str(last.get("message") or waiting.get("message") or "")[:200]
            name = pod["metadata"]["name"]
            return f"Pod {name}: {reason}" + (f": {message}" if message else "")
    return None


def unschedulable_since(pod: Mapping[str, Any]) -> float | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            return parse_time(cond.get("lastTransitionTime"))
    return None


def sandbox_missing_since(pod: Mapping[str, Any]) -> float | None:
    """When a scheduled Pod's node began to make its sandbox, while it has not made it: the
    kubelet keeps ``PodReadyToStartContainers`` False until the sandbox and its network
    exist. Image pulls come after, so only a sandbox the runtime refuses stays here (a node
    whose runtime lacks user namespaces refuses a ``dind-userns`` Pod so)."""
    conditions = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}
    ready = conditions.get("PodReadyToStartContainers") or {}
    scheduled = conditions.get("PodScheduled") or {}
    if ready.get("status") == "False" and scheduled.get("status") == "True":
        return parse_time(ready.get("lastTransitionTime"))
    return None


def job_view(job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> RunnerJobView:
    meta = job.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    pods = list(pods)
    live = [p for p in pods if _live(p)]
    starts = [t for t in (pod_started_at(p) for p in live) if t is not None]
    problems = [m for m in (pod_problem(p) for p in live) if m]
    unschedulable = [t for t in (unschedulable_since(p) for p in live) if t is not None]
    no_sandbox = [t for t in (sandbox_missing_since(p) for p in live) if t is not None]
    return RunnerJobView(
        name=meta["name"],
        created_at=parse_time(meta.get("creationTimestamp")) or 0.0,
        finished=job_finished(job) or runner_exited(pods),
        deleting=bool(meta.get("deletionTimestamp")),
        took_job=annotations.get(constants.TOOK_JOB_ANNOTATION) == "true",
        pod_names=tuple(sorted(p["metadata"]["name"] for p in live)),
        failed=job_finished(job, ("Failed",)),
        started_at=min(starts) if starts else None,
        pod_problem=problems[0] if problems else None,
        unschedulable_since=min(unschedulable) if unschedulable else None,
        all_pod_names=tuple(sorted(p["metadata"]["name"] for p in pods)),
        unguarded_pods=tuple(
            sorted(
                p["metadata"]["name"]
                for p in live
                if (p["metadata"].get("annotations") or {}).get(SAFE_TO_EVICT) != "false"
            )
        ),
        suspended=job_suspended(job),
        sandbox_missing_since=min(no_sandbox) if no_sandbox else None,
    )


def job_suspended(job: Mapping[str, Any]) -> bool:
    """``spec.suspend``, or the Job controller's ``Suspended`` condition when the spec is
    not at hand."""
    spec = job.get("spec")
    if isinstance(spec, Mapping) and "suspend" in spec:
        return bool(spec["suspend"])
    return job_finished(job, ("Suspended",))


def pods_by_job(pods: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Group Pods by the Job that owns them (the Job controller sets ``job-name`` and names
    them ``{job}-{suffix}``). A Pod whose name does not start with its Job's is not that
    Job's: a runner registers under its Pod's name, so a Pod a tenant made, labelled as its
    runner's but named like another team's runner, would make that registration look like
    its group's to disable and delete."""
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        job_name = labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")
        if job_name and str(pod["metadata"].get("name", "")).startswith(f"{job_name}-"):
            grouped.setdefault(job_name, []).append(pod)
    return grouped
