"""Pickups first: while a woken group is getting its runner, bulk work waits a little.

A webhook delivery wakes a group; its pickup then takes ten or so turns of the event loop
(Gitea's answer, the pass, the runner create and its answer), and every turn also runs
whatever else became ready meanwhile. Under issue 45's attacks that was other tenants'
answers by the hundred a second: each turn carried some, and a healthy pickup's p99 went
from 33 to 70 ms, with the loop's lag at p99 under 25 ms. Answers already on the way
cannot be held back; the work that starts new ones can. So a pickup opens a *window* (from
the wake until the group's next pass, and the runner creates it handed to the group's
writer, have ended; at most ``WINDOW`` seconds), and while any
window is open, bulk work (a Gitea request of a poll nobody woke, a heavy answer's
processing) waits for all of them to close, at most ``MAKE_WAY_AT_MOST`` seconds each time:
so nothing waits longer than that for any number of pickups, and a tenant's flood of wakes
(each group's already paced by the webhook's limiter) costs others' polls that much per
request at most. Work done for a pickup (``urgent``) never waits.

While a window is open, the garbage collector's automatic collections are paused too: a
young collection under attack took 8 ms on average, 46 in 90 s; it runs as soon as the
last window closes, on what was allocated meanwhile. A pause lasts one ``WINDOW`` at most
and the next may begin only as long after it: windows that never stop (a flood of wakes)
leave the collector half the time at least, so the cyclic garbage it finds stays bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Final

# A pickup's window closes after this at the latest (a pickup under every attack took
# 0.07 s at p99, wake to create answered; the pass normally closes it well before).
WINDOW: Final = 0.2
# Bulk work waits at most this long each time it makes way.
MAKE_WAY_AT_MOST: Final = 0.1

_URGENT: ContextVar[bool] = ContextVar("gro_urgent", default=False)


@dataclass(slots=True, eq=False)
class _Window:
    began: float
    timer: asyncio.TimerHandle
    tenant: str
    carried: int = 0  # work of the pickup still under way after its pass (carry)
    passed: bool = False  # its pass has ended


class Priority:
    def __init__(
        self,
        window: float = WINDOW,
        make_way_at_most: float = MAKE_WAY_AT_MOST,
        clock: Callable[[], float] = time.monotonic,
        pause_gc: bool = True,
    ) -> None:
        self.window, self.make_way_at_most = window, make_way_at_most
        self._clock, self._pause_gc = clock, pause_gc
        self._open: dict[Hashable, _Window] = {}
        self._tenants: Counter[str] = Counter()  # open windows by tenant
        self._waiting: dict[asyncio.Future[None], str] = {}  # bulk steps, by tenant
        self._loop: asyncio.AbstractEventLoop | None = None
        self._gc_paused = False
        self._gc_timer: asyncio.TimerHandle | None = None
        self._gc_resumed_at = -math.inf
        self.made_way = 0  # bulk steps that waited (tests, benchmarks)

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """A new loop (tests): the last one's windows and waiters are gone with it."""
        if loop is self._loop:
            return
        self._loop = loop
        self._open.clear()
        self._tenants.clear()
        self._waiting.clear()
        self._resume_gc()

    @property
    def under_way(self) -> bool:
        return bool(self._open)

    def begin(self, key: Hashable, tenant: str = "") -> None:
        """A pickup of ``key`` (a group of ``tenant``) begins: a delivery woke it. Outside a
        running loop: nothing."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._bind(loop)
        if key in self._open:
            return  # the first wake's window goes on; its pass closes it
        timer = loop.call_later(self.window, self._close, key)
        self._open[key] = _Window(self._clock(), timer, tenant)
        self._tenants[tenant] += 1
        if tenant:  # its own bulk work goes on (make_way): a step of the woken group's poll,
            # in flight, may have begun to wait for another tenant's pickup
            for future, whose in list(self._waiting.items()):
                if whose == tenant and not future.done():
                    future.set_result(None)
        self._pause_collector(loop)

    def passed(self, key: Hashable, started: float) -> None:
        """A pass of ``key`` that started at ``started`` (this clock) ended: the pickup's, if
        it started after the wake (a pass already under way then read the answer before).
        Its window closes, unless work it handed on is still under way (:meth:`carry`)."""
        window = self._open.get(key)
        if window is None or started < window.began:
            return
        window.passed = True
        if not window.carried:
            self._close(key)

    def carry(self, key: Hashable) -> Callable[[], None]:
        """Work that ``key``'s pickup hands on (its runner creates, written by the group's
        writer after the pass): the window stays open until the returned callable is called
        (or it times out). Called before the pass ends, so the window cannot close between
        the two; nothing when no window is open."""
        window = self._open.get(key)
        if window is None:
            return _nothing
        window.carried += 1
        done = False

        def finished() -> None:
            nonlocal done
            if done:
                return
            done = True
            window.carried -= 1
            if self._open.get(key) is window and window.passed and not window.carried:
                self._close(key)

        return finished

    def _close(self, key: Hashable) -> None:
        window = self._open.pop(key, None)
        if window is not None:
            window.timer.cancel()
            self._tenants[window.tenant] -= 1
            if not self._tenants[window.tenant]:
                del self._tenants[window.tenant]
        if self._open:
            return
        self._resume_gc()
        waiting, self._waiting = self._waiting, {}
        for future in waiting:
            if not future.done():
                future.set_result(None)

    def _pause_collector(self, loop: asyncio.AbstractEventLoop) -> None:
        """Pause automatic collections for one window at most, and never again before as
        long has passed: pickups that never stop (a flood of wakes) leave the collector at
        least half the time, so cyclic garbage stays bounded."""
        if not self._pause_gc or self._gc_paused or not gc.isenabled():
            return
        if self._clock() < self._gc_resumed_at + self.window:
            return
        gc.disable()
        self._gc_paused = True
        self._gc_timer = loop.call_later(self.window, self._resume_gc)

    def _resume_gc(self) -> None:
        if self._gc_timer is not None:
            self._gc_timer.cancel()
            self._gc_timer = None
        if self._gc_paused:
            self._gc_paused = False
            self._gc_resumed_at = self._clock()
            gc.enable()

    @contextlib.contextmanager
    def urgent(self) -> Iterator[None]:
        """Work of a pickup (a woken group's observation): it never makes way."""
        token = _URGENT.set(True)
        try:
            yield
        finally:
            _URGENT.reset(token)

    async def make_way(self, tenant: str = "") -> None:
        """Bulk work of ``tenant``: return at once when no pickup is under way, when this
        is one's work, or when a pickup of the same tenant is (a poll of the woken group
        that began before the wake is on its way: it must not wait for its own pickup);
        else once none is, or after ``make_way_at_most``."""
        if not self._open or _URGENT.get() or (tenant and tenant in self._tenants):
            return
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._bind(loop)
            return
        self.made_way += 1
        future = loop.create_future()
        self._waiting[future] = tenant
        timer = loop.call_later(self.make_way_at_most, _settle, future)
        try:
            await future
        finally:
            timer.cancel()
            self._waiting.pop(future, None)


def _nothing() -> None:
    pass


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


# The process's one: the webhook's wakes and the reconcile workers open and close windows;
# the forge's bulk requests and heavy answers make way.
PICKUPS = Priority()
