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

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gitea_runner_operator.api.credentials import normalise_url
from gitea_runner_operator.objects.views import RunnerJobView
from gitea_runner_operator.reconcile.capacity.accounting import Answer, Claimant
from gitea_runner_operator.reconcile.capacity.ledger import Ledger
from gitea_runner_operator.reconcile.inputs import GroupPass
from gitea_runner_operator.reconcile.scaling import RACE_HOLD, START_BOUND, RunnerState
from gitea_runner_operator.reconcile.state import GroupState
from gitea_runner_operator.reconcile.why.unmatched_book import UnmatchedBook


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
    p: GroupPass,
    *,
    blocked: bool,
    now: float,
    start_bound: float = START_BOUND,
    busy_since: tuple[float, ...] = (),
) -> Claimant:
    """The group as its family's accounting sees it, from its pass (read with its spec and
    answer). Its pending Jobs (the cache does not show them yet) hold a slot and cover a job
    like a starting runner; ``released`` runners cover one too (churn.py)."""
    assert p.spec is not None
    states = p.states
    late = late_runners(p.views, states, now, start_bound)
    not_busy = [v for v in p.views if states[v.name] in (RunnerState.STARTING, RunnerState.IDLE)]
    # Pending Jobs are being made now; a runner late to start covers nothing (below).
    young = p.pending + sum(
        1
        for v in not_busy
        if now - v.created_at <= RACE_HOLD and not overdue(v, states[v.name], now, start_bound)
    )
    return Claimant.of(
        p.key,
        p.spec,
        not_busy=p.pending + p.released + len(not_busy) - late,
        alive=p.alive,
        blocked=blocked or late > 0,
        busy_since=busy_since,
        young=young,
    )


def can_create(p: GroupPass, state: GroupState, cache_ok: bool, now: float) -> bool:
    """Whether the group could start a runner now: only then does it claim jobs by its
    spare capacity, so a broken group never holds jobs a healthy peer could run."""
    if p.snapshot is not None and p.snapshot.problem is not None:
        return False  # not Ready: Gitea, a Secret or the configuration is at fault
    if not cache_ok:
        return False  # runners would not start before its cache config exists
    return not state.creation_held(now)  # backing off: runners that could not start, a refusal


@dataclass(frozen=True, slots=True)
class Claims:
    """The claims step: tell the ledger (and the unmatched-jobs book) what this group knows
    of itself, its runners, its room, its latest answer. Costs this group's own Jobs only."""

    ledger: Ledger
    unmatched: UnmatchedBook
    start_bound: float = START_BOUND
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time

    def report(self, p: GroupPass, state: GroupState, cache_ok: bool) -> bool:
        """Report ``p`` (read with its spec and answer). True when the group is blocked: it
        holds no share of its family's jobs."""
        assert p.spec is not None
        snapshot, observation, states = p.snapshot, p.observation, p.states
        blocked = not can_create(p, state, cache_ok, self.clock())
        if snapshot is not None and observation is not None:
            for name, runner in states.items():
                if runner is RunnerState.BUSY:
                    state.busy_since.setdefault(name, snapshot.started_at)
        state.busy_since = {
            n: t for n, t in state.busy_since.items() if states.get(n) is RunnerState.BUSY
        }
        group = claimant(
            p,
            blocked=blocked,
            now=self.wall_clock(),
            start_bound=self.start_bound,
            # Runners seen busy, and finished ones its own answer does not count: each may
            # have taken a job a peer's older answer lists (ledger._as_of).
            busy_since=tuple(sorted((*state.busy_since.values(), *p.finished_at))),
        )
        answer = None
        if snapshot is not None and observation is not None and snapshot.problem is None:
            answer = Answer(
                p.key,
                snapshot.started_at,
                observation.queued,
                unserved=observation.unserved,
                unserved_other=observation.unserved_other,
            )
        url = normalise_url(p.spec.gitea.url)
        before = self.ledger.members.get(p.key)
        self.ledger.report(
            url,
            group,
            answer,
            (*observation.in_progress, *observation.finished) if observation else (),
            failing=snapshot is not None and answer is None,
        )
        self.unmatched.changed(before, self.ledger.members.get(p.key))
        late = late_runners(p.views, states, self.wall_clock(), self.start_bound)
        return blocked or late > 0

    def forget(self, key: str) -> None:
        """The group creates nothing any more: it leaves the book of members (the ledger's
        and the unmatched-jobs evaluation's alike), and its peers take its jobs."""
        self.unmatched.changed(self.ledger.remove(key), None)

    def knows(self, key: str) -> bool:
        return key in self.ledger.members
