"""The RunnerGroup status the reconciler wants, computed from plain data.

Status is ours (GitOps tools own the spec): we write it through the status subresource and
only when something changed, so a quiet group makes no API traffic beyond one patch per poll.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

READY = "Ready"
RUNNERS_HEALTHY = "RunnersHealthy"


@dataclass(frozen=True, slots=True)
class Problem:
    """Why a group cannot work right now. ``reason`` is a CamelCase condition reason and
    ``message`` a sentence naming the field or object at fault; neither ever holds a secret."""

    reason: str
    message: str


def ready_condition(
    problem: Problem | None, *, demand: int, alive: int, max_active: int
) -> dict[str, str]:
    if problem is not None:
        return {
            "type": READY,
            "status": "False",
            "reason": problem.reason,
            "message": problem.message,
        }
    if alive >= max_active and demand > alive:
        message = f"at maxActiveRunners ({max_active}); {demand} matching jobs queued"
        return {"type": READY, "status": "True", "reason": "AtCapacity", "message": message}
    message = f"{demand} matching jobs queued, {alive} runners active"
    return {"type": READY, "status": "True", "reason": "Polling", "message": message}


def runners_healthy_condition(failed_jobs: Sequence[str]) -> dict[str, str]:
    """Failed runner Jobs (kept until their TTL) usually mean a wrong registration token, a
    Gitea URL the Pods cannot reach, or an image that does not start: say so on the group
    instead of leaving users to find it in Pod logs."""
    if not failed_jobs:
        return {
            "type": RUNNERS_HEALTHY,
            "status": "True",
            "reason": "NoFailures",
            "message": "no failed runner Jobs",
        }
    names = ", ".join(sorted(failed_jobs)[:3]) + (", ..." if len(failed_jobs) > 3 else "")
    return {
        "type": RUNNERS_HEALTHY,
        "status": "False",
        "reason": "RunnerJobsFailed",
        "message": (
            f"{len(failed_jobs)} runner Job(s) failed ({names}); check the runner Pods' logs, "
            "spec.registrationToken and whether the Pods can reach spec.gitea.url"
        ),
    }


def find_condition(status: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any]:
    """The condition of that type in a status, or an empty mapping."""
    for cond in (status or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return cond  # type: ignore[no-any-return]
    return {}


def merge_conditions(
    previous: Sequence[Mapping[str, Any]], wanted: Sequence[Mapping[str, str]], now_iso: str
) -> list[dict[str, Any]]:
    """Keep ``lastTransitionTime`` unless the condition's status flipped, as the API
    conventions ask, so that users can tell how long a group has been failing."""
    old = {c.get("type"): c for c in previous}
    merged = []
    for cond in wanted:
        before = old.get(cond["type"])
        since = now_iso
        if before is not None and before.get("status") == cond["status"]:
            since = str(before.get("lastTransitionTime") or now_iso)
        merged.append({**cond, "lastTransitionTime": since})
    return merged


def desired_status(
    *,
    previous: Mapping[str, Any] | None,
    generation: int,
    active: int,
    queued: int | None,
    last_check_time: str | None,
    ready: Mapping[str, str],
    now_iso: str,
    target: str | None = None,
    extra_conditions: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    prev = previous or {}
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "activeRunners": active,
        "conditions": merge_conditions(
            prev.get("conditions") or [], [ready, *extra_conditions], now_iso
        ),
    }
    # Keep the last known figures when Gitea cannot be asked, rather than claiming zero.
    if target is not None:
        status["target"] = target
    if queued is not None:
        status["queuedJobs"] = queued
    elif "queuedJobs" in prev:
        status["queuedJobs"] = prev["queuedJobs"]
    if last_check_time is not None:
        status["lastCheckTime"] = last_check_time
    elif "lastCheckTime" in prev:
        status["lastCheckTime"] = prev["lastCheckTime"]
    return status


def status_differs(previous: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> bool:
    prev = previous or {}
    return any(prev.get(k) != v for k, v in wanted.items())
