"""When a group's next time-driven decision falls due, so that its reconcile is queued then.

A reconcile is queued when something it reads changes (poll/triggers.py); some decisions
change with nothing changing but the clock: a starting runner passes ``startupTimeout``
(reaped), the claims' start bound (it stops covering a job) or a Pod-start grace (the
group reports why it cannot start); an idle runner passes ``idleTimeout`` or, warm,
``warmRunnerMaxAge``; a created Job the watch never showed stops being expected. The
reconcile asks to come back at the soonest of these (``requeue_after``), so none of them
waits for a poll that no longer queues a pass.
Pure: plain data in, seconds out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gitea_runner_operator.objects.views import RunnerJobView
from gitea_runner_operator.reconcile.scaling import (
    NO_POD_GRACE,
    START_BOUND,
    UNSCHEDULABLE_GRACE,
    RunnerState,
)

# A deadline is met a little after it passes: the rules compare with ``>``.
SLACK = 0.5


def next_due(
    views: Iterable[RunnerJobView],
    states: Mapping[str, RunnerState],
    *,
    now: float,
    startup_timeout: float,
    idle_timeout: float,
    warm_max_age: float,
    start_bound: float = START_BOUND,
    expectation_lapses: float | None = None,
) -> float | None:
    """Seconds (wall clock) until the soonest timer of the group's live runners, or until
    the soonest expectation of a created Job lapses (``expectation_lapses``, seconds from
    now: a Job created but never shown by the watch holds a slot until then); None when
    nothing has a timer running (busy and finished runners change by events)."""
    deadlines: list[float] = []
    if expectation_lapses is not None:
        deadlines.append(now + expectation_lapses)
    for view in views:
        if not view.alive:
            continue
        state = states.get(view.name)
        if state is RunnerState.STARTING:
            deadlines.append(view.created_at + startup_timeout)
            if not view.suspended:
                deadlines.append(view.created_at + start_bound)
                if view.unschedulable_since is not None:
                    deadlines.append(view.unschedulable_since + UNSCHEDULABLE_GRACE)
                if not view.all_pod_names:
                    deadlines.append(view.created_at + NO_POD_GRACE)
        elif state is RunnerState.IDLE:
            since = view.started_at if view.started_at is not None else view.created_at
            deadlines.append(since + min(idle_timeout, warm_max_age))
    future = [d - now for d in deadlines if d > now]
    return max(min(future), 0.0) + SLACK if future else None
