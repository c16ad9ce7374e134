"""What one group claims in its family's accounting (accounting.py): the jobs its runners
cover and the room it has to create more. Pure.

A group that cannot create now holds no share, so its peers serve the family's jobs at once
instead of waiting for it: it has no room while it is *blocked* (Gitea or a Secret at fault,
its cache server not ready, backing off after runners that could not start or a create the
API server refused), and a runner that has not started within ``start_bound`` covers no job
and blocks the group too. ``startupTimeout`` (up to 24 h) is when such a runner is reaped;
the bound here is only how long its group may keep peers from a job, so it is short: a runner
that starts later still takes a job, at worst leaving a peer's runner to idle out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.kube.views import RunnerJobView
from gitea_runner_operator.reconcile.accounting import Claimant
from gitea_runner_operator.reconcile.scaling import RunnerState

# How long a runner may take to start (Pod scheduled, image pulled, registered) before it
# stops covering a job in its family's accounting.
START_BOUND = 120.0


def overdue(view: RunnerJobView, state: RunnerState, now: float, start_bound: float) -> bool:
    """A runner still starting ``start_bound`` after its Job was created. A suspended Job
    (Forgejo, waiting for its credentials) has no Pod on purpose and is not late."""
    return (
        state is RunnerState.STARTING and not view.suspended and now - view.created_at > start_bound
    )


def late_runners(
    views: Sequence[RunnerJobView],
    states: Mapping[str, RunnerState],
    now: float,
    start_bound: float = START_BOUND,
) -> int:
    return sum(1 for v in views if overdue(v, states[v.name], now, start_bound))


def claimant(
    key: str,
    spec: RunnerGroupSpec,
    views: Sequence[RunnerJobView],
    states: Mapping[str, RunnerState],
    *,
    pending: int,
    released: int,
    blocked: bool,
    now: float,
    start_bound: float = START_BOUND,
    busy_since: tuple[float, ...] = (),
) -> Claimant:
    """The group as its family's accounting sees it. ``pending`` Jobs are being created (the
    cache does not show them yet): they hold a slot and cover a job like a starting runner."""
    alive = sum(1 for v in views if states[v.name] is not RunnerState.GONE) + pending
    late = late_runners(views, states, now, start_bound)
    covering = sum(1 for v in views if states[v.name] in (RunnerState.STARTING, RunnerState.IDLE))
    return Claimant(
        key=key,
        scope=spec.scope,
        org=spec.org,
        repo=spec.repo,
        offered=spec.label_names,
        not_busy=pending + released + covering - late,
        spare=0 if blocked or late else spec.max_active_runners - alive,
        busy_since=busy_since,
    )
