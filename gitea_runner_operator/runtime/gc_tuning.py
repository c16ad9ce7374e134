"""The garbage collector, tuned for a process whose heap is mostly long-lived caches.

Under every attack at once the event loop's lag p99 was set by full collections of up to
131 ms (issue 45): CPython's full collection walks every tracked object, and the operator's
are mostly its caches (informers' objects, answers kept, the book of members), which live as
long as the process. ``gc.freeze()`` once those are filled moves them to the permanent
generation, which no collection walks; the young generations' thresholds are raised so
that parsing a page of answers does not trigger a collection every 700 allocations.
Measured with tests/benchmarks/gc_lag.py (figures in docs/benchmarks.md).

A freeze at start is not enough under attack: what the polls keep afterwards (observations
of thousands of jobs) is promoted to the old generation, and a full collection walks it all
again; a middle collection walks up to ``THRESHOLDS[0] * THRESHOLDS[1]`` objects. The stall
probe (tests/benchmarks/stallprobe.py) saw one middle collection of 100 ms of CPU with
(10,000, 20, 20). So the middle generation is kept smaller, and every ``REFREEZE_EVERY``
seconds what is not frozen is collected and then frozen too: a full collection walks at most
what survived since the last freeze. Reference counting still frees a frozen object; what a
freeze keeps is cyclic garbage: frozen objects that later die in a cycle (a request in
flight at the refreeze, say). That is bounded by the memory it may cost: once the
process's resident memory (a frozen cycle may hold a large answer's bytes, which are not
counted as objects) has grown by a quarter of the room that was left under the container's
memory limit (at most doubled), by a quarter without a limit, or the frozen objects by a
quarter where the memory is not known, the heap is thawed, collected whole and frozen again
(``settle_due``). That whole collection is one pause of the loop for every tenant (up to
176 ms of CPU under issue 45's attacks), so it is not paid for the growth of live data more
often than the memory calls for, and it waits until right after a woken pickup
(``quiet_moment``).
"""

from __future__ import annotations

import asyncio
import gc
import math
import os
import time
from collections.abc import Callable
from typing import Final

import structlog

log = structlog.get_logger(__name__)

# (gen0, gen1, gen2): CPython's are (700, 10, 10). A middle collection walks at most about
# 10,000 * 4 objects (it was 10,000 * 20: 100 ms of CPU under attack).
THRESHOLDS: Final = (10_000, 4, 20)
REFREEZE_EVERY: Final = 10.0
THAW_GROWTH: Final = 0.25
# A whole collection waits for the next delivery's wake, then until none woke a group for
# QUIET_AFTER seconds (a woken pickup took at most 0.14 s under every attack at once, p99);
# each wait at most QUIET_WAIT seconds.
QUIET_AFTER: Final = 0.2
QUIET_WAIT: Final = 2.0
WAKE_POLL: Final = 0.02  # how often the wait for the next wake looks


def tune_thresholds() -> None:
    """Collect the young generation less often (at process start)."""
    gc.set_threshold(*THRESHOLDS)


_thawed_at = 0  # objects frozen right after the last full collection
_resident_at = 0  # and the resident bytes then


def resident_bytes() -> int:
    """The process's resident memory now (0 where /proc is not there)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def settle_heap() -> None:
    """What is alive now lives long (the caches just filled): collect once, then move it out
    of the collections' way."""
    global _thawed_at, _resident_at
    wall, cpu, before = time.perf_counter(), time.thread_time(), resident_bytes()
    gc.unfreeze()
    found = gc.collect()
    gc.freeze()
    _thawed_at = gc.get_freeze_count()
    _resident_at = resident_bytes()
    log.debug(
        "heap settled",
        frozen=_thawed_at,
        unreachable=found,
        took=round(time.perf_counter() - wall, 4),
        cpu=round(time.thread_time() - cpu, 4),
        resident_mib=(before >> 20, _resident_at >> 20),
    )


def settle_due(frozen: int, resident: int, limit: int | None) -> bool:
    """Whether the cyclic garbage the freezes may have kept can now cost enough memory to
    pay a whole collection's pause for (up to 176 ms of CPU at 120,000 objects, issue 45).

    Where the resident memory is known, its growth since the last settle is the measure,
    whatever holds it (objects, or an answer's bytes that no object count sees). Under a
    memory limit the growth allowed is a quarter of the room that was left under the limit,
    at most the resident memory itself: far from the limit the heap may double first (the
    attacks' live data grew the RSS from 76 to 232 MiB in 90 s, which a quarter of the RSS
    paid for with four whole collections, each freeing 0-14 MiB), near it a few MiB
    settle. Without a limit, a quarter of the RSS; without /proc, a quarter more frozen
    objects."""
    if resident and _resident_at:
        room = min(THAW_GROWTH * (limit - _resident_at), _resident_at) if limit else None
        return resident - _resident_at > (THAW_GROWTH * _resident_at if room is None else room)
    return frozen > (1 + THAW_GROWTH) * _thawed_at


def refreeze(resident: Callable[[], int] = resident_bytes, limit: int | None = None) -> bool:
    """Freeze what survived since the last freeze, after a full collection that walks only
    that (everything older is frozen), so its cyclic garbage is freed first; or, once
    ``settle_due``, settle the whole heap again, which frees the cyclic garbage the freezes
    kept. ``limit``: the container's memory limit in bytes (None: none). Whether it settled
    the whole heap."""
    if settle_due(gc.get_freeze_count(), resident(), limit):
        settle_heap()
        return True
    wall, cpu = time.perf_counter(), time.thread_time()
    found = gc.collect()  # walks only what is not frozen: what was promoted since the last freeze
    gc.freeze()
    log.debug(
        "heap refrozen",
        frozen=gc.get_freeze_count(),
        unreachable=found,
        took=round(time.perf_counter() - wall, 4),
        cpu=round(time.thread_time() - cpu, 4),
    )
    return False


_settling: asyncio.Task[None] | None = None  # the one refreeze loop of the process


def settle_after(
    synced: asyncio.Event,
    limit: int | None = None,
    woken_at: Callable[[], float] = lambda: -math.inf,
) -> None:
    """Settle the heap once ``synced`` is set (the informers' caches are full), then refreeze
    every ``REFREEZE_EVERY`` seconds (which settles it again as the first polls' answers and
    the book of members come in, by the growth bound); each waits for a quiet moment
    (``quiet_moment``: ``woken_at``, when a delivery last woke a group). Never awaited: the
    controller does not wait for it. A controller made again (leadership regained) replaces
    the loop of the one before rather than adding one."""
    global _settling
    if _settling is not None:
        _settling.cancel()
    _settling = asyncio.get_running_loop().create_task(
        _settle(synced, limit, woken_at), name="gc-settle"
    )
    _settling.add_done_callback(_ended)


def _ended(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and (error := task.exception()) is not None:
        log.error(
            "the heap's refreeze loop failed; collections go on as CPython's", error=repr(error)
        )


async def quiet_moment(
    woken_at: Callable[[], float], clock: Callable[[], float] = time.monotonic
) -> None:
    """Right behind a woken pickup: once the next delivery has woken a group (at most
    ``QUIET_WAIT`` seconds' wait) and then none has for ``QUIET_AFTER`` seconds (at most
    ``QUIET_WAIT`` more). A whole collection pauses the loop for every tenant (up to 176 ms
    of CPU under issue 45's attacks): one started while a woken group's refresh, pass or
    runner create was under way made that job one of the two slowest of its run (233 and
    274 ms). Started at any quiet moment, it still met the delivery after it (a 119 ms pause
    begun 0.46 s after the last wake, 40 ms before the next one, when deliveries came every
    0.5 s): the moment least likely to meet the next pickup is right after one. Both waits
    are bounded, so neither a steady stream of deliveries nor none at all (webhooks off) puts
    the memory's bound off."""
    last = woken_at()
    deadline = clock() + QUIET_WAIT
    while clock() < deadline:
        if woken_at() != last:
            break
        await asyncio.sleep(WAKE_POLL)
    deadline = clock() + QUIET_WAIT
    while True:
        left = min(woken_at() + QUIET_AFTER, deadline) - clock()
        if left <= 0:
            return
        await asyncio.sleep(left)


async def _settle(synced: asyncio.Event, limit: int | None, woken_at: Callable[[], float]) -> None:
    await synced.wait()
    settle_heap()
    while True:
        await asyncio.sleep(REFREEZE_EVERY)
        # A refreeze walks what survived since the last one: 20-40 ms of the loop under
        # issue 45's attacks, up to 91; it waits for the moment behind a pickup too.
        await quiet_moment(woken_at)
        refreeze(limit=limit)
