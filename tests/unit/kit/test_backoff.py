"""The one back-off rule (kit/backoff.py), which the work queue, the poll task and the
reconcile's create and stuck back-offs share, and the one jitter rule."""

from __future__ import annotations

import pytest

from gitea_runner_operator.kit.backoff import doubling, jittered
from gitea_runner_operator.runtime.workqueue import ExponentialBackoff


@pytest.mark.parametrize(
    ("base", "cap", "attempt", "delay"),
    [
        (5.0, 300.0, 0, 5.0),
        (5.0, 300.0, 1, 5.0),
        (5.0, 300.0, 2, 10.0),
        (5.0, 300.0, 4, 40.0),
        (5.0, 300.0, 7, 300.0),
        (60.0, 1800.0, 6, 1800.0),
        (0.5, 300.0, 5000, 300.0),  # never overflows
    ],
)
def test_doubling_up_to_the_cap(base, cap, attempt, delay):
    assert doubling(base, cap, attempt) == delay


def test_the_work_queue_doubles_from_its_base():
    limiter: ExponentialBackoff[str] = ExponentialBackoff(base=0.5, cap=4.0)
    assert [limiter.when("k") for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    for _ in range(2000):
        limiter.when("k")  # 2**2000 used to overflow a float
    assert limiter.when("k") == 4.0


def test_a_jittered_delay_spans_its_factors_evenly_in_either_order():
    assert jittered(10.0, 0.5, 1.0, lambda: 0.0) == 5.0
    assert jittered(10.0, 0.5, 1.0, lambda: 1.0) == 10.0
    assert jittered(10.0, 0.5, 1.0, lambda: 0.5) == 7.5
    assert jittered(100.0, 1.0, 0.75, lambda: 0.0) == 100.0  # a drawn 0 keeps the first factor
    assert jittered(100.0, 1.0, 0.75, lambda: 1.0) == 75.0


def test_a_jittered_delay_stays_within_its_bounds_and_varies():
    drawn = {jittered(2.0, 0.9, 1.1) for _ in range(200)}
    assert all(1.8 <= d <= 2.2 for d in drawn)
    assert len(drawn) > 100  # spread, not one value for every caller
