"""The overlap benchmark's fill, step by step: what bounds it (tests/benchmarks/scale.py)."""

from __future__ import annotations

import time

from tests.benchmarks import common
from tests.support.fake_gitea import SimulatedGitea
from tests.support.launcher import OperatorProcess

RECONCILE_COUNT = "gitea_runner_operator_reconcile_duration_seconds_count"


class Timeline:
    """What the fill did, every ``every`` seconds: runner Jobs alive, and per second in that
    step the Job creates, status patches, reconciles, the work queue's depth and Gitea
    requests; to see what bounds it. Reads /metrics at most once per step."""

    def __init__(self, op: OperatorProcess, fake: SimulatedGitea, t0: float, every: float = 5.0):
        self.op, self.fake, self.t0, self.every = op, fake, t0, every
        self.rows: list[str] = []
        self.last: tuple[float, float, float, float, float] | None = None

    def sample(self, count: int) -> None:
        now = time.monotonic() - self.t0
        if self.last is not None and now - self.last[0] < self.every:
            return
        m = self.op.metrics()
        by = common.writes_by_kind(m)
        point = (
            now,
            by.get("create jobs", 0.0),
            by.get("patch runnergroups/status", 0.0),
            common.total(m, RECONCILE_COUNT),
            float(self.fake.requests),
        )
        depth = common.total(m, "gitea_runner_operator_workqueue_depth")
        if self.last is not None:
            dt = max(now - self.last[0], 1e-9)
            rates = [(point[i] - self.last[i]) / dt for i in range(1, 5)]
            self.rows.append(
                f"  {now:5.0f}s {count:5d} {rates[0]:7.1f} {rates[1]:7.1f} {rates[2]:7.1f}"
                f" {depth:6.0f} {rates[3]:7.1f}"
            )
        self.last = point

    def print(self) -> None:
        print("fill timeline (per second over each step):")
        print("      t  Jobs creates patches recs   queue  Gitea")
        print("\n".join(self.rows))
