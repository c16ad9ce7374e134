"""The heap of long-lived caches is moved out of the collector's way once they are full
(runtime/gc_tuning.py): a full collection then walks only what is young. The loop-lag
figures are tests/benchmarks/gc_lag.py's (a benchmark, not a timed test)."""

from __future__ import annotations

import asyncio
import gc
import weakref

from gitea_runner_operator.runtime import gc_tuning


async def test_the_heap_is_frozen_once_the_caches_are_synced_then_refrozen(monkeypatch):
    settled: list[int] = []
    refrozen: list[int] = []
    monkeypatch.setattr(gc_tuning, "settle_heap", lambda: settled.append(1))
    monkeypatch.setattr(gc_tuning, "refreeze", lambda limit=None: bool(refrozen.append(1)))
    monkeypatch.setattr(gc_tuning, "QUIET_WAIT", 0.001)  # no delivery here: no wait
    monkeypatch.setattr(gc_tuning, "REFREEZE_EVERY", 0.01)
    synced = asyncio.Event()
    gc_tuning.settle_after(synced)
    await asyncio.sleep(0.05)
    assert settled == refrozen == []  # not before the caches are full
    synced.set()
    await asyncio.sleep(0.1)
    assert settled == [1]  # at sync
    assert len(refrozen) >= 2  # then again and again, as what the polls keep comes in
    assert gc_tuning._settling is not None
    gc_tuning._settling.cancel()


async def test_a_controller_made_again_replaces_the_refreeze_loop_rather_than_adding_one():
    gc_tuning.settle_after(asyncio.Event())
    first = gc_tuning._settling
    gc_tuning.settle_after(asyncio.Event())
    await asyncio.sleep(0)
    assert first is not None and first.cancelled()
    assert gc_tuning._settling is not None and not gc_tuning._settling.done()
    gc_tuning._settling.cancel()


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


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def _in_collected_generations(obj: object) -> bool:
    return any(any(o is obj for o in gc.get_objects(g)) for g in range(3))


def test_a_full_collection_after_a_refreeze_walks_only_what_is_newer():
    try:
        gc_tuning.settle_heap()
        kept = [{"job": i} for i in range(1000)]  # what a poll keeps after the settle
        assert _in_collected_generations(kept)
        assert gc_tuning.refreeze(lambda: 0) is False  # no full collection
        assert not _in_collected_generations(kept)
        newer = [{"job": -1}]
        assert _in_collected_generations(newer)
        assert len(gc.get_objects(2)) < 100  # what a full collection would walk
    finally:
        gc.unfreeze()


def test_cyclic_garbage_a_freeze_kept_is_freed_once_the_frozen_heap_grew_by_a_quarter():
    try:
        gc_tuning.settle_heap()
        node = _Node()
        dead = weakref.ref(node)
        gc_tuning.refreeze(lambda: 0)  # frozen while alive
        del node
        gc.collect()
        assert dead() is not None  # kept: frozen objects are not walked
        # The heap grows past the bound (the caches of a busier operator).
        growth = [[i] for i in range(int(gc.get_freeze_count() * gc_tuning.THAW_GROWTH) + 1)]
        assert gc_tuning.refreeze(lambda: 0) is False  # the growth is frozen at this refreeze
        assert gc_tuning.refreeze(lambda: 0) is True  # past the bound: thawed, collected whole
        assert dead() is None
        del growth
    finally:
        gc.unfreeze()


def test_a_frozen_cycle_holding_a_large_answer_is_freed_once_resident_memory_grew_by_a_quarter():
    """A few objects may hold many bytes (an answer's body): the object count alone would
    keep them frozen."""
    try:
        gc_tuning.settle_heap()
        node = _Node()
        node.body = b"x" * (8 << 20)  # type: ignore[attr-defined]
        dead = weakref.ref(node)
        gc_tuning.refreeze(lambda: 0)
        del node
        assert gc_tuning.refreeze(lambda: 0) is False
        assert dead() is not None
        assert gc_tuning.refreeze(lambda: int(gc_tuning._resident_at * 1.3)) is True
        assert dead() is None
    finally:
        gc.unfreeze()


MIB = 1 << 20


def test_live_data_growing_far_below_the_memory_limit_does_not_pause_everyone_again(
    monkeypatch,
):
    """Under issue 45's attacks the RSS grew from 76 to 232 MiB of live data in 90 s, and a
    settle at each quarter of growth paused the loop four times (each 61-146 ms of CPU, a
    healthy job queued then waiting for it), freeing 0-14 MiB each."""
    monkeypatch.setattr(gc_tuning, "_resident_at", 76 * MIB)
    monkeypatch.setattr(gc_tuning, "_thawed_at", 74_000)
    limit = 384 * MIB
    # A third more resident memory, and more frozen objects: the attacks' live data.
    assert not gc_tuning.settle_due(115_000, 100 * MIB, limit)
    assert not gc_tuning.settle_due(115_000, 150 * MIB, limit)
    assert gc_tuning.settle_due(115_000, 153 * MIB, limit)  # doubled: settled
    # Near the limit a few MiB of growth is a quarter of the room left.
    monkeypatch.setattr(gc_tuning, "_resident_at", 300 * MIB)
    assert not gc_tuning.settle_due(0, 320 * MIB, limit)
    assert gc_tuning.settle_due(0, 322 * MIB, limit)


def test_without_a_limit_a_quarter_more_memory_settles_and_without_proc_the_object_count(
    monkeypatch,
):
    monkeypatch.setattr(gc_tuning, "_resident_at", 100 * MIB)
    monkeypatch.setattr(gc_tuning, "_thawed_at", 1000)
    assert not gc_tuning.settle_due(10_000, 125 * MIB, None)
    assert gc_tuning.settle_due(0, 126 * MIB, None)
    assert not gc_tuning.settle_due(1250, 0, None)  # /proc not there: the frozen objects
    assert gc_tuning.settle_due(1251, 0, None)


async def test_the_refreeze_loop_measures_against_the_limit_it_was_given(monkeypatch):
    limits: list[int | None] = []
    monkeypatch.setattr(gc_tuning, "settle_heap", lambda: None)
    monkeypatch.setattr(gc_tuning, "refreeze", lambda limit=None: bool(limits.append(limit)))
    monkeypatch.setattr(gc_tuning, "QUIET_WAIT", 0.001)  # no delivery here: no wait
    monkeypatch.setattr(gc_tuning, "REFREEZE_EVERY", 0.01)
    synced = asyncio.Event()
    synced.set()
    gc_tuning.settle_after(synced, 384 * MIB)
    await asyncio.sleep(0.05)
    assert limits and set(limits) == {384 * MIB}
    assert gc_tuning._settling is not None
    gc_tuning._settling.cancel()


async def test_a_whole_collection_waits_until_a_woken_pickup_is_done(monkeypatch):
    """Under every attack at once, a whole collection started while a woken group's refresh,
    pass or runner create was under way made that job the slowest of its run (233 and
    274 ms): it starts once no delivery woke a group for QUIET_AFTER seconds."""
    monkeypatch.setattr(gc_tuning, "QUIET_AFTER", 0.05)
    loop = asyncio.get_running_loop()
    woken = [loop.time() - 10.0]
    waiting = asyncio.ensure_future(gc_tuning.quiet_moment(lambda: woken[0], loop.time))
    await asyncio.sleep(0.03)
    woken[0] = loop.time()  # a delivery woke a group just now
    await asyncio.sleep(0.03)
    woken[0] = loop.time()  # and another
    await asyncio.sleep(0.03)
    assert not waiting.done()  # 0.06 s after the first, 0.03 s after the second
    await asyncio.sleep(0.06)
    assert waiting.done()


async def test_a_whole_collection_starts_right_behind_a_pickup_not_before_the_next(monkeypatch):
    """A quiet moment alone is not enough: a 119 ms pause begun 0.46 s after the last wake,
    with deliveries every 0.5 s, met the next pickup. The collection waits for the next
    wake and goes QUIET_AFTER behind it."""
    monkeypatch.setattr(gc_tuning, "QUIET_AFTER", 0.05)
    loop = asyncio.get_running_loop()
    woken = [loop.time() - 0.3]  # the last pickup is long done
    waiting = asyncio.ensure_future(gc_tuning.quiet_moment(lambda: woken[0], loop.time))
    await asyncio.sleep(0.1)
    assert not waiting.done()  # quiet for 0.4 s, and still it waits for the next wake
    woken[0] = loop.time()
    started = loop.time()
    await waiting
    assert 0.04 < loop.time() - started < 0.15


async def test_no_delivery_at_all_puts_the_collection_off_for_quiet_wait_only(monkeypatch):
    monkeypatch.setattr(gc_tuning, "QUIET_WAIT", 0.05)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await gc_tuning.quiet_moment(lambda: -1e9, loop.time)  # webhooks off: no wake ever
    assert 0.04 < loop.time() - started < 0.2


async def test_a_stream_of_deliveries_does_not_put_the_collection_off_for_long(monkeypatch):
    monkeypatch.setattr(gc_tuning, "QUIET_WAIT", 0.05)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await gc_tuning.quiet_moment(loop.time, loop.time)  # a delivery at every moment
    assert 0.04 < loop.time() - started < 0.5


async def test_every_refreeze_and_settle_waits_for_the_moment_behind_a_pickup(monkeypatch):
    """A refreeze walks what survived since the last one, 20-40 ms of the loop under issue
    45's attacks (up to 91 ms): like a whole collection, it goes right behind a pickup."""
    quiet: list[int] = []
    refrozen: list[int] = []

    async def quiet_moment(woken_at):
        quiet.append(1)

    monkeypatch.setattr(gc_tuning, "settle_heap", lambda: None)
    monkeypatch.setattr(gc_tuning, "refreeze", lambda limit=None: bool(refrozen.append(1)))
    monkeypatch.setattr(gc_tuning, "quiet_moment", quiet_moment)
    monkeypatch.setattr(gc_tuning, "REFREEZE_EVERY", 0.01)
    synced = asyncio.Event()
    synced.set()
    gc_tuning.settle_after(synced, None, lambda: 0.0)
    await asyncio.sleep(0.05)
    assert refrozen and len(quiet) >= len(refrozen)
    assert gc_tuning._settling is not None
    gc_tuning._settling.cancel()
