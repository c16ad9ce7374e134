"""The stuck back-off remembers which reaped runners it already counted, and no more: the
names of runner Jobs that are gone are forgotten, so the memory follows the group's runners,
not its history."""

from __future__ import annotations

import sys

from gitea_runner_operator.api.runnergroup import parse_spec
from gitea_runner_operator.reconcile.scaling import Plan, ReapCandidate, ReapReason, RunnerState
from gitea_runner_operator.reconcile.state import GroupState
from gitea_runner_operator.reconcile.steps.stuck import note_stuck
from tests.support.builders import VALID


def reaping(names: list[str]) -> Plan:
    reap = tuple(ReapCandidate(n, ReapReason.STARTUP_TIMEOUT, (), ()) for n in names)
    return Plan(create=0, reap=reap, states=dict.fromkeys(names, RunnerState.STARTING))


def test_a_reaped_runner_counts_once_and_gone_runners_are_forgotten():
    spec, state = parse_spec(VALID), GroupState()
    note_stuck(reaping(["a", "b"]), spec, state, now=0.0)
    note_stuck(reaping(["a", "b"]), spec, state, now=1.0)  # the same two, still there
    assert state.stuck_failures == 1
    for cycle in range(100):  # 100 cycles of 1,000 reaps (before: 100,000 names, 10.7 MiB)
        note_stuck(reaping([f"r{cycle}-{i}" for i in range(1000)]), spec, state, now=cycle)
    assert len(state.stuck_jobs) == 1000
    assert sys.getsizeof(state.stuck_jobs) + sum(map(sys.getsizeof, state.stuck_jobs)) < 2**20
    note_stuck(Plan(create=0), spec, state, now=200.0)  # no runners left
    assert state.stuck_jobs == set()
