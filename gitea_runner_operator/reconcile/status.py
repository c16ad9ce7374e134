"""The RunnerGroup status the reconciler wants, computed from plain data.

Status is ours (GitOps tools own the spec): we write it through the status subresource and
only when something a user can see changed. ``lastCheckTime`` alone is refreshed at most once
a minute, so a quiet group costs the API server about one write a minute, not one per poll.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from gitea_runner_operator.api.hooks import HookStatus
from gitea_runner_operator.api.observation import Problem

READY = "Ready"
RUNNERS_HEALTHY = "RunnersHealthy"
WEBHOOK = "Webhook"
LAST_CHECK_REFRESH = 60.0


def utc_now_iso() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def ready_condition(
    problem: Problem | None,
    *,
    demand: int,
    alive: int,
    max_active: int,
    complete: bool = True,
) -> dict[str, str]:
    if problem is not None:
        return {
            "type": READY,
            "status": "False",
            "reason": problem.reason,
            "message": problem.message,
        }
    if not complete:
        message = (
            f"Gitea's queue is longer than the operator pages through; at least {demand} "
            f"matching jobs queued, {alive} runners active"
        )
        return {"type": READY, "status": "True", "reason": "QueuePartiallyRead", "message": message}
    if alive >= max_active and demand > alive:
        message = f"at maxActiveRunners ({max_active}); {demand} matching jobs queued"
        return {"type": READY, "status": "True", "reason": "AtCapacity", "message": message}
    message = f"{demand} matching jobs queued, {alive} runners active"
    return {"type": READY, "status": "True", "reason": "Polling", "message": message}


def _names(items: Sequence[str], limit: int = 3) -> str:
    shown = "; ".join(sorted(items)[:limit])
    return shown + ("; ..." if len(items) > limit else "")


def runners_healthy_condition(
    *,
    failed_jobs: Sequence[str] = (),
    start_failures: Sequence[str] = (),
    stuck: str | None = None,
    create_error: str | None = None,
) -> dict[str, str]:
    """Whether the group's runners can do their work, with the most actionable reason first.
    Users should not have to read Pod logs to learn that no runner can start."""

    def bad(reason: str, message: str) -> dict[str, str]:
        return {"type": RUNNERS_HEALTHY, "status": "False", "reason": reason, "message": message}

    if create_error:
        return bad("JobCreateRefused", create_error)
    if start_failures:
        return bad(
            "RunnerPodsNotStarting",
            f"{len(start_failures)} runner Pod(s) cannot start: {_names(start_failures)}",
        )
    if stuck:
        return bad("RunnersNotTakingJobs", stuck)
    if failed_jobs:
        return bad(
            "RunnerJobsFailed",
            f"{len(failed_jobs)} runner Job(s) failed ({_names(failed_jobs)}); check the "
            "runner Pods' logs, spec.registrationToken and whether the Pods can reach "
            "spec.gitea.url",
        )
    return {
        "type": RUNNERS_HEALTHY,
        "status": "True",
        "reason": "NoFailures",
        "message": "runner Pods start and take jobs",
    }


def webhook_condition(hook: HookStatus) -> dict[str, str]:
    """``Webhook``: whether the group's own hook (``spec.webhook.manageHook``) exists in
    Gitea as wanted. Only present while the operator manages the hook."""
    return {
        "type": WEBHOOK,
        "status": "True" if hook.ok else "False",
        "reason": hook.reason,
        "message": hook.message,
    }


def without_condition(status: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """``status`` minus the condition ``kind``: a merge patch of the result drops it."""
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != kind]
    return {**status, "conditions": conditions}


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
    conventions ask, so that users can tell how long a group has been failing. Conditions
    not recomputed this pass are kept as they are: a merge patch replaces the whole list,
    and a Gitea error must not erase what is known about the runners."""
    old = {c.get("type"): c for c in previous}
    merged = []
    for cond in wanted:
        before = old.get(cond["type"])
        since = now_iso
        if before is not None and before.get("status") == cond["status"]:
            since = str(before.get("lastTransitionTime") or now_iso)
        merged.append({**cond, "lastTransitionTime": since})
    types = {c["type"] for c in wanted}
    merged.extend(dict(c) for c in previous if c.get("type") not in types)
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
    runners: Mapping[str, int] | None = None,
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
    for name, value in (("queuedJobs", queued), ("lastCheckTime", last_check_time)):
        if value is not None:
            status[name] = value
        elif name in prev:
            status[name] = prev[name]
    if runners is not None:
        status["runners"] = dict(runners)
    elif "runners" in prev:
        status["runners"] = prev["runners"]
    return status


def _age(iso: Any, now: float) -> float:
    try:
        then = dt.datetime.fromisoformat(str(iso).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return float("inf")
    return now - then


def status_differs(
    previous: Mapping[str, Any] | None, wanted: Mapping[str, Any], now: float | None = None
) -> bool:
    """Whether a write is worth it. A new ``lastCheckTime`` alone counts only once the
    recorded one is ``LAST_CHECK_REFRESH`` old."""
    prev = previous or {}
    for key, value in wanted.items():
        if prev.get(key) == value:
            continue
        if (
            key == "lastCheckTime"
            and now is not None
            and "lastCheckTime" in prev
            and _age(prev["lastCheckTime"], now) < LAST_CHECK_REFRESH
        ):
            continue
        return True
    return False
