"""The garbage collector, tuned for a process whose heap is mostly long-lived caches.

Under every attack at once the event loop's lag p99 was set by full collections of up to
131 ms (issue 45): CPython's full collection walks every tracked object, and the operator's
are mostly its caches (informers' objects, answers kept, the book of members), which live as
long as the process. ``gc.freeze()`` once those are filled moves them to the permanent
generation, which no collection walks; the young generations' thresholds are raised so
that parsing a page of answers does not trigger a collection every 700 allocations.
Measured with tests/benchmarks/gc_lag.py (figures in docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import gc
from typing import Final

import structlog

log = structlog.get_logger(__name__)

# (gen0, gen1, gen2): CPython's are (700, 10, 10).
THRESHOLDS: Final = (10_000, 20, 20)
# After the caches filled, the heap is settled once more when the first polls' answers and
# the book of members are in.
SETTLE_AGAIN: Final = 120.0


def tune_thresholds() -> None:
    """Collect the young generation less often (at process start)."""
    gc.set_threshold(*THRESHOLDS)


def settle_heap() -> None:
    """What is alive now lives long (the caches just filled): collect once, then move it out
    of the collections' way."""
    gc.collect()
    gc.freeze()
    log.debug("heap settled", frozen=gc.get_freeze_count())


_settling: set[asyncio.Task[None]] = set()  # kept alive until they end


def settle_after(synced: asyncio.Event) -> None:
    """Settle the heap once ``synced`` is set (the informers' caches are full), and again
    ``SETTLE_AGAIN`` seconds later. Never awaited: the controller does not wait for it."""
    task = asyncio.get_running_loop().create_task(_settle(synced), name="gc-settle")
    _settling.add(task)
    task.add_done_callback(_settling.discard)


async def _settle(synced: asyncio.Event) -> None:
    await synced.wait()
    settle_heap()
    await asyncio.sleep(SETTLE_AGAIN)
    settle_heap()
