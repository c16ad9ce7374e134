"""The RunnerGroup status the reconciler wants, computed from plain data.

Status is ours (GitOps tools own the spec): we write it through the status subresource and
only when something a user can see changed. A new ``lastCheckTime`` alone is never worth a
write: it is written with the next real change, so a quiet group writes no status at all
(every write is a watch event for each controller watching RunnerGroups, GitOps tools
included). How fresh a group's answer is lives in the ``last_check_timestamp_seconds``
metric instead.

Besides ``Ready``, the status carries the two abnormal-true conditions that kstatus (Flux's
health checks, ``kubectl wait``, Argo CD's health check) reads: ``Reconciling`` while a new
generation is on its way to ``Ready``, ``Stalled`` for what waits for a person. Both are
present only while True (Flux's convention; kstatus reads an absent one as False).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gitea_runner_operator.api.hooks import HookStatus
from gitea_runner_operator.api.observation import Problem, ProblemKind

READY = "Ready"
RUNNERS_HEALTHY = "RunnersHealthy"
WEBHOOK = "Webhook"
RECONCILING = "Reconciling"
STALLED = "Stalled"
# A Secret (or a ConfigMap the spec names) missing or unreadable for this long is reported as
# Stalled. GitOps tools often apply a group a few seconds before its Secret, or leave the
# Secret to another controller (sealed or external secrets): that is progress, not a failure.
# Twenty of the 3 s Secret retries (poll/poller.py SECRET_RETRY).
STALL_GRACE = 60.0


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
    previous: Sequence[Mapping[str, Any]],
    wanted: Sequence[Mapping[str, str]],
    now_iso: str,
    *,
    generation: int | None = None,
    drop: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Keep ``lastTransitionTime`` unless the condition's status flipped, as the API
    conventions ask, so that users can tell how long a group has been failing. Conditions
    not recomputed this pass are kept as they are, with the ``observedGeneration`` they were
    computed for: a merge patch replaces the whole list, and a Gitea error must not erase
    what is known about the runners. ``drop``: types that are gone unless wanted again."""
    old = {c.get("type"): c for c in previous}
    merged = []
    for cond in wanted:
        before = old.get(cond["type"])
        since = now_iso
        if before is not None and before.get("status") == cond["status"]:
            since = str(before.get("lastTransitionTime") or now_iso)
        stamped: dict[str, Any] = {**cond, "lastTransitionTime": since}
        if generation is not None:
            stamped["observedGeneration"] = generation
        merged.append(stamped)
    gone = {c["type"] for c in wanted} | set(drop)
    merged.extend(dict(c) for c in previous if c.get("type") not in gone)
    return merged


def stalls(
    problem: Problem | None,
    *,
    since: float | None,
    now: float,
    previous: Mapping[str, Any] | None,
) -> bool:
    """Whether ``problem`` waits for a person: a spec or a template the operator refuses at
    once, a Secret (or a ConfigMap the spec names) once it has been wrong ``STALL_GRACE``
    seconds (``since``: when this process first saw it). A Secret already reported Stalled
    for the same reason stays so across a restart, which forgets ``since``. Gitea and API
    server failures heal by themselves: never Stalled."""
    if problem is None:
        return False
    if problem.kind is ProblemKind.CONFIG:
        return True
    if problem.kind is not ProblemKind.SECRET:
        return False
    before = find_condition(previous, STALLED)
    if before.get("status") == "True" and before.get("reason") == problem.reason:
        return True
    return since is not None and now - since >= STALL_GRACE


def grace_left(problem: Problem | None, *, since: float | None, now: float) -> float | None:
    """Seconds until a Secret problem turns Stalled (a pass must come back then: the same
    failed answer, repeated, queues none), or None."""
    if problem is None or problem.kind is not ProblemKind.SECRET or since is None:
        return None
    left = STALL_GRACE - (now - since)
    return left if left > 0 else None


def applying(previous: Mapping[str, Any] | None, generation: int) -> bool:
    """Whether ``generation`` is still on its way to Ready: the status describes an older
    one (or none), or a pass since it was seen said Reconciling and no pass has ended it."""
    prev = previous or {}
    if prev.get("observedGeneration") != generation:
        return True
    return find_condition(prev, RECONCILING).get("status") == "True"


def progress_conditions(
    previous: Mapping[str, Any] | None,
    generation: int,
    ready: Mapping[str, str],
    problem: Problem | None,
    *,
    stalled: bool,
) -> list[dict[str, str]]:
    """``Reconciling`` or ``Stalled`` (never both: kstatus takes the first True one it meets),
    or neither. Stalled repeats Ready's reason and message, so that a GitOps tool that reads
    only Stalled says what is wrong. Reconciling is True for a Secret still within its grace,
    and for a new generation until it is Ready or Stalled (through Gitea failures too, as
    Flux's ProgressingWithRetry: it is not Ready yet, and it will be without anyone's help)."""
    if stalled:
        return [
            {
                "type": STALLED,
                "status": "True",
                "reason": ready["reason"],
                "message": ready["message"],
            }
        ]
    if ready["status"] == "True":
        return []
    if problem is not None and problem.kind is ProblemKind.SECRET:
        message = f"{problem.message}; reported as Stalled if it lasts {STALL_GRACE:.0f}s"
        return [
            {"type": RECONCILING, "status": "True", "reason": problem.reason, "message": message}
        ]
    if applying(previous, generation):
        return [
            {
                "type": RECONCILING,
                "status": "True",
                "reason": ready["reason"],
                "message": ready["message"],
            }
        ]
    return []


def applying_status(
    previous: Mapping[str, Any] | None, generation: int, now_iso: str
) -> dict[str, Any] | None:
    """The status patch that says a new generation is being applied, before the poll task
    has answered for it (so before Ready can be recomputed), or None when there is nothing
    new to say. Only the Reconciling condition names the new generation: ``observedGeneration``
    and Ready stay those of the status they describe, so that kstatus reads the group as in
    progress and ``kubectl wait --for=condition=Ready`` waits for the new one.

    The patch holds the conditions alone. ``previous`` is the informer's copy, which may lag
    a write made earlier in the same pass: sending its other fields back overwrote a
    ``status.cache`` that had just turned ready with the older "starting", and nothing wrote
    it again (a full CI run waited 180 s for it)."""
    prev = previous or {}
    if prev.get("observedGeneration") == generation:
        return None
    before = find_condition(prev, RECONCILING)
    if before.get("status") == "True" and before.get("observedGeneration") == generation:
        return None
    reconciling = {
        "type": RECONCILING,
        "status": "True",
        "reason": "Progressing",
        "message": f"generation {generation} is being applied; Ready follows the first answer "
        "from Gitea for it",
    }
    conditions = merge_conditions(
        prev.get("conditions") or [],
        [reconciling],
        now_iso,
        generation=generation,
        drop=(STALLED,),
    )
    return {"conditions": conditions}


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
    progress: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """``progress``: the Reconciling or Stalled condition of this pass (progress_conditions);
    whichever of the two is not in it is removed."""
    prev = previous or {}
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "activeRunners": active,
        "conditions": merge_conditions(
            prev.get("conditions") or [],
            [ready, *extra_conditions, *progress],
            now_iso,
            generation=generation,
            drop=(RECONCILING, STALLED),
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


def status_differs(previous: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> bool:
    """Whether a write is worth it. A new ``lastCheckTime`` alone is not: it ages until
    something else changes (the module's docstring says why)."""
    prev = previous or {}
    for key, value in wanted.items():
        if prev.get(key) == value or (key == "lastCheckTime" and key in prev):
            continue
        return True
    return False
