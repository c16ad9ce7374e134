"""The event loop is watched: a stall shows in the lag histogram and in the log, and a
stream of stalls costs one warning line per interval, not one per stall."""

from __future__ import annotations

import asyncio
import time

from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from gitea_runner_operator.metrics import PREFIX, Metrics
from gitea_runner_operator.runtime.loopwatch import LoopWatch


def lag_samples(metrics: Metrics) -> dict[str, float]:
    """``le`` -> cumulative count of the lag histogram, plus ``count``."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            if s.name == PREFIX + "event_loop_lag_seconds_bucket":
                found[s.labels["le"]] = s.value
            elif s.name == PREFIX + "event_loop_lag_seconds_count":
                found["count"] = s.value
    return found


async def test_a_stall_of_the_loop_shows_in_the_lag_histogram_and_the_log() -> None:
    metrics = Metrics()
    watch = LoopWatch(interval=0.02, warn_above=0.2, observe=metrics.loop_lag)
    with capture_logs() as logs:
        watch.start()
        await asyncio.sleep(0.1)
        time.sleep(0.4)  # noqa: ASYNC251 - the stall under test
        await asyncio.sleep(0.1)
        await watch.stop()
    samples = lag_samples(metrics)
    assert samples["count"] >= 3
    # The stall was counted above 0.25 s; the quiet wakes below it.
    assert samples["0.25"] < samples["+Inf"]
    assert samples["0.25"] >= 1
    stalls = [e for e in logs if e["event"] == "event loop stalled"]
    assert len(stalls) == 1
    assert stalls[0]["log_level"] == "warning"
    assert 0.3 <= stalls[0]["lag_s"] < 1.0
    assert watch.max_lag >= 0.3


async def test_many_stalls_cost_one_line_per_interval_with_the_count_of_the_rest() -> None:
    watch = LoopWatch(interval=0.01, warn_above=0.02, warn_every=60.0)
    with capture_logs() as logs:
        watch.start()
        for _ in range(5):
            await asyncio.sleep(0.02)
            time.sleep(0.05)  # noqa: ASYNC251 - the stalls under test
        await asyncio.sleep(0.03)
        await watch.stop()
    stalls = [e for e in logs if e["event"] == "event loop stalled"]
    assert len(stalls) == 1  # the rest fall within the same minute
    assert watch.stalls >= 5


async def test_the_heartbeat_stays_fresh_while_the_loop_runs_and_ages_while_it_is_stuck() -> None:
    watch = LoopWatch(interval=0.02)
    watch.start()
    await asyncio.sleep(0.05)
    assert watch.heartbeat_age() < 0.1
    time.sleep(0.2)  # noqa: ASYNC251 - the loop is stuck; another thread would see this age
    assert watch.heartbeat_age() >= 0.2
    await asyncio.sleep(0.05)
    assert watch.heartbeat_age() < 0.1
    await watch.stop()
