"""A watch on the event loop: how late it wakes, and a heartbeat other threads can read.

Everything the operator does shares one event loop, so anything that holds it (a large
render, a parse, a tenant's input that costs more than it should) delays every group and
the probes. A task that sleeps a fixed interval and measures how late it woke sees every
such stall whatever caused it: the lag goes to a histogram, a stall above a threshold to
the log (one line per ``warn_every`` with the count of the others and the worst), and the
time of each wake is a heartbeat that the Lease thread reads to tell a slow loop from a
wedged one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Final

import structlog

from gitea_runner_operator.kit.lograte import LogRate

log = structlog.get_logger(__name__)

INTERVAL: Final = 0.5
WARN_ABOVE: Final = 0.25
WARN_EVERY: Final = 10.0


def _ignore(_: float) -> None:
    pass


@dataclass(eq=False)
class LoopWatch:
    """``observe`` receives each wake's lag in seconds (a histogram's ``observe``)."""

    _: KW_ONLY
    interval: float = INTERVAL
    warn_above: float = WARN_ABOVE
    warn_every: float = WARN_EVERY
    observe: Callable[[float], None] = _ignore
    clock: Callable[[], float] = time.monotonic
    # Written by the loop, read by other threads: a float is replaced whole under the GIL.
    beat: float = field(init=False)
    max_lag: float = field(default=0.0, init=False)
    stalls: int = field(default=0, init=False)  # wakes later than ``warn_above``
    _rate: LogRate = field(init=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False)
    _worst_held: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self.beat = self.clock()
        self._rate = LogRate(self.warn_every, max_keys=1, clock=self.clock)

    def heartbeat_age(self) -> float:
        """Seconds since the loop last woke this watch; safe to call from any thread."""
        return max(0.0, self.clock() - self.beat)

    async def __aenter__(self) -> LoopWatch:
        self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    def start(self) -> None:
        if self._task is None:
            self.beat = self.clock()
            self._task = asyncio.create_task(self._run(), name="loop-watch")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            asleep = self.clock()
            await asyncio.sleep(self.interval)
            woke = self.clock()
            self.beat = woke
            self._woke(max(0.0, woke - asleep - self.interval))

    def _woke(self, lag: float) -> None:
        self.observe(lag)
        self.max_lag = max(self.max_lag, lag)
        if lag <= self.warn_above:
            return
        self.stalls += 1
        held = self._rate.admit("stall")
        if held is None:
            self._worst_held = max(self._worst_held, lag)
            return
        log.warning(
            "event loop stalled",
            lag_s=round(lag, 3),
            threshold_s=self.warn_above,
            held_back=held,
            worst_held_back_s=round(self._worst_held, 3),
        )
        self._worst_held = 0.0
