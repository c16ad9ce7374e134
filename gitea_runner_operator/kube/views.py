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

    @property
    def alive(self) -> bool:
        return not (self.finished or self.deleting)


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


def job_view(job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> RunnerJobView:
    meta = job.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    pod_names = tuple(
        sorted(
            p["metadata"]["name"]
            for p in pods
            if not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        )
    )
    return RunnerJobView(
        name=meta["name"],
        created_at=parse_time(meta.get("creationTimestamp")) or 0.0,
        finished=job_finished(job),
        deleting=bool(meta.get("deletionTimestamp")),
        took_job=annotations.get(constants.TOOK_JOB_ANNOTATION) == "true",
        pod_names=pod_names,
        failed=job_finished(job, ("Failed",)),
    )


def pods_by_job(pods: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Group Pods by the Job that owns them (the Job controller sets ``job-name``)."""
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        job_name = labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")
        if job_name:
            grouped.setdefault(job_name, []).append(pod)
    return grouped
