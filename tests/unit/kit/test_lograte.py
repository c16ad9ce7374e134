"""Log lines someone else can cause: one per cause per interval, and the next says how many
were held back."""

from __future__ import annotations

from gitea_runner_operator.kit.lograte import LogRate


def test_a_rate_limited_log_says_how_many_lines_it_held_back() -> None:
    now = [0.0]
    rate = LogRate(10.0, clock=lambda: now[0])
    assert rate.admit("a") == 0  # the first line of a cause goes out, nothing held back
    assert rate.admit("a") is None
    assert rate.admit("a") is None
    assert rate.admit("b") == 0  # another cause has its own budget
    now[0] = 10.0
    assert rate.admit("a") == 2  # the next line says two were held back
    assert rate.admit("a") is None


def test_a_rate_limited_log_forgets_the_oldest_cause_beyond_its_bound() -> None:
    now = [0.0]
    rate = LogRate(10.0, max_keys=3, clock=lambda: now[0])
    for key in range(100):
        assert rate.admit(key) == 0
    assert len(rate) == 3
