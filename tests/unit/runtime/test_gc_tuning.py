"""The heap of long-lived caches is moved out of the collector's way once they are full
(runtime/gc_tuning.py): a full collection then walks only what is young. The loop-lag
figures are tests/benchmarks/gc_lag.py's (a benchmark, not a timed test)."""

from __future__ import annotations

import asyncio
import gc

from gitea_runner_operator.runtime import gc_tuning


async def test_the_heap_is_frozen_once_the_caches_are_synced(monkeypatch):
    settled: list[int] = []
    monkeypatch.setattr(gc_tuning, "settle_heap", lambda: settled.append(1))
    monkeypatch.setattr(gc_tuning, "SETTLE_AGAIN", 0.01)
    synced = asyncio.Event()
    gc_tuning.settle_after(synced)
    await asyncio.sleep(0.02)
    assert settled == []  # not before the caches are full
    synced.set()
    await asyncio.sleep(0.1)
    assert settled == [1, 1]  # at sync, and once the first answers are in


def test_settling_freezes_what_is_alive_and_collects_the_rest_first():
    thresholds = gc.get_threshold()
    try:
        gc_tuning.tune_thresholds()
        assert gc.get_threshold() == gc_tuning.THRESHOLDS
        cycle: list[object] = []
        cycle.append(cycle)
        del cycle
        before = gc.get_freeze_count()
        gc_tuning.settle_heap()
        assert gc.get_freeze_count() > before
        assert gc.collect() == 0  # the garbage was collected before the freeze
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
