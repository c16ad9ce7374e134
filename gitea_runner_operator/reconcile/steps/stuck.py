"""Stuck back-off: runners reaped because they never started, or idled while matching jobs
waited, will not do better if replaced at once. Creation is held back, doubling each time,
and the user is told why. A runner that takes a job ends the episode. Pure."""

from __future__ import annotations

from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.kit.backoff import doubling
from gitea_runner_operator.reconcile.scaling import Plan, ReapReason, RunnerState
from gitea_runner_operator.reconcile.state import GroupState

STUCK_BACKOFF_BASE = 60.0
STUCK_BACKOFF_MAX = 1800.0


def note_stuck(decision: Plan, spec: RunnerGroupSpec, state: GroupState, now: float) -> None:
    """Update ``state``'s back-off (``blocked_until``, ``stuck_message``) after ``decision``."""
    if decision.count(RunnerState.BUSY) > 0 and state.stuck_failures:
        state.stuck_failures, state.blocked_until, state.stuck_message = 0, 0.0, None
    # Only runner Jobs that still exist can be reaped again: the names of the rest are
    # forgotten, so this memory is bounded by the group's Jobs, not by its history.
    state.stuck_jobs.intersection_update(decision.states)
    new = [
        c
        for c in decision.reap
        if c.reason in (ReapReason.IDLE_WITH_DEMAND, ReapReason.STARTUP_TIMEOUT)
        and c.job_name not in state.stuck_jobs
    ]
    if not new:
        return
    state.stuck_jobs.update(c.job_name for c in new)
    state.stuck_failures += 1
    delay = doubling(STUCK_BACKOFF_BASE, STUCK_BACKOFF_MAX, state.stuck_failures)
    state.blocked_until = now + delay
    idle = [c.job_name for c in new if c.reason is ReapReason.IDLE_WITH_DEMAND]
    if idle:
        state.stuck_message = (
            f"runner(s) {', '.join(idle)} stayed idle for spec.idleTimeout "
            f"({spec.idle_timeout}) while {decision.demand} matching job(s) were queued. "
            "Likely causes: a label the runner parses differently from spec.labels, a "
            "registration token of another scope than spec.scope, or a runner image too "
            "old for these labels. New runners are held back for "
            f"{delay:.0f}s"
        )
    else:
        names = ", ".join(c.job_name for c in new)
        state.stuck_message = (
            f"runner(s) {names} did not register within spec.startupTimeout "
            f"({spec.startup_timeout}); check the runner Pods, spec.gitea.url from "
            f"inside the cluster and spec.registrationToken. New runners are held back "
            f"for {delay:.0f}s"
        )
