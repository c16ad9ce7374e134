"""A group's whole status after one pass, and the Events that mark its transitions, composed
from plain data: what the pass found (:class:`Found`) and the parts its steps and the poll
task handed to it (reconcile/status/parts.py). The writer (reconcile/steps/status_write.py)
only holds back, sends and records what this returns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gitea_runner_operator.api.cadence import Cadence, interval_text
from gitea_runner_operator.api.hooks import HookStatus
from gitea_runner_operator.api.observation import Problem, Snapshot
from gitea_runner_operator.reconcile import forgejo
from gitea_runner_operator.reconcile.status import conditions as st
from gitea_runner_operator.reconcile.status.parts import Part


@dataclass(frozen=True, slots=True)
class Found:
    """What one pass found about a group, as the status reports it."""

    problem: Problem | None
    generation: int
    alive: int
    ready: dict[str, str]
    healthy: dict[str, str]
    stalled: bool
    queued: int | None = None
    runners: Mapping[str, int] | None = None
    snapshot: Snapshot | None = None
    target: str | None = None
    # None: the group's spec is not known (no condition about a hook is touched);
    # otherwise whether it asks the operator to keep its hook, and how that went.
    manages_hook: bool | None = None
    hook: HookStatus | None = None
    # The poll interval in force and why (None: not polled yet), and spec.pollInterval.
    cadence: Cadence | None = None
    base_interval: float | None = None


@dataclass(frozen=True, slots=True)
class Composed:
    status: dict[str, Any]
    events: tuple[tuple[str, str], ...]  # (reason, message) of the Warnings to emit


def compose(previous: Mapping[str, Any], found: Found, part: Part, now_iso: str) -> Composed:
    """The status to write (a merge patch of the whole status) and its Warnings."""
    problem, ready, healthy = found.problem, found.ready, found.healthy
    extra = [healthy]
    if found.hook is not None:
        extra.append(st.webhook_condition(found.hook))
    progress = st.progress_conditions(
        previous, found.generation, ready, problem, stalled=found.stalled
    )
    wanted = st.desired_status(
        # No hook of ours: no condition about one.
        previous=st.without_condition(previous, st.WEBHOOK)
        if found.manages_hook is False
        else previous,
        generation=found.generation,
        active=found.alive,
        queued=found.queued,
        runners=found.runners,
        last_check_time=found.snapshot.checked_at if found.snapshot is not None else None,
        ready=ready,
        now_iso=now_iso,
        target=found.target,
        extra_conditions=extra,
        progress=progress,
    )
    forge = forgejo.forge_status(forgejo.forge_of(found.snapshot), previous)
    if forge is not None:
        wanted["forge"] = forge
    if found.cadence is not None and found.base_interval is not None:
        wanted["poll"] = poll_status(found.cadence, found.base_interval)
    wanted.update(part.fields)
    return Composed(wanted, (*_transitions(previous, found), *part.events))


def poll_status(cadence: Cadence, base: float) -> dict[str, str]:
    """``status.poll``: the interval in force, why, and what changes it."""
    return {
        "interval": interval_text(cadence.interval),
        "reason": cadence.reason.value,
        "message": cadence.message(base),
    }


def _transitions(previous: Mapping[str, Any], found: Found) -> list[tuple[str, str]]:
    """Events mark transitions, not every pass."""
    events: list[tuple[str, str]] = []
    problem, healthy, hook = found.problem, found.healthy, found.hook
    if problem is not None and st.find_condition(previous, st.READY).get("reason") != (
        problem.reason
    ):
        events.append((problem.reason, problem.message))
    before = st.find_condition(previous, st.RUNNERS_HEALTHY)
    if healthy["status"] == "False" and before.get("reason") != healthy["reason"]:
        events.append((healthy["reason"], healthy["message"]))
    hook_before = st.find_condition(previous, st.WEBHOOK).get("reason")
    if hook is not None and not hook.ok and hook_before != hook.reason:
        events.append((hook.reason, hook.message))
    return events
