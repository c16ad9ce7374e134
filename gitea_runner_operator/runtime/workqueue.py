"""A work queue with client-go's semantics, for asyncio.

- A key waiting in the queue is queued once, however many events arrive for it.
- A key being processed is never handed to a second worker; an ``add`` meanwhile marks it
  dirty, and ``done`` queues it again, so an event during processing causes exactly one more
  pass.
- ``add_after`` keeps the earlier deadline when the key already waits.
- ``add_rate_limited`` backs off per key, exponentially; ``forget`` resets that key.

No locks are needed: only ``get`` awaits, and everything else runs between awaits.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

from gitea_runner_operator.kit.backoff import doubling

K = TypeVar("K", bound=Hashable)


class ShutDown(Exception):
    """Raised by ``get`` once the queue is shut down."""


class ExponentialBackoff(Generic[K]):
    """Per-key delay ``base * 2**failures``, capped (client-go's ItemExponentialFailure)."""

    def __init__(self, base: float = 0.5, cap: float = 300.0) -> None:
        self.base = base
        self.cap = cap
        self._failures: dict[K, int] = {}

    def when(self, key: K) -> float:
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        return doubling(self.base, self.cap, failures + 1)

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)

    def retries(self, key: K) -> int:
        return self._failures.get(key, 0)


class QueueMetrics(Protocol):
    """What a queue reports (``gitea_runner_operator.metrics.WorkQueueMetrics``)."""

    def bind(self, depth: Callable[[], int], longest_running: Callable[[], float]) -> None: ...
    def added(self) -> None: ...
    def retried(self) -> None: ...
    def waited(self, seconds: float) -> None: ...
    def worked(self, seconds: float) -> None: ...


class WorkQueue(Generic[K]):
    def __init__(
        self,
        limiter: ExponentialBackoff[K] | None = None,
        *,
        metrics: QueueMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._waiting: dict[K, float] = {}
        self._timers: set[asyncio.TimerHandle] = set()
        self._wakeup = asyncio.Event()
        self._shutting_down = False
        self.limiter: ExponentialBackoff[K] = (
            limiter if limiter is not None else ExponentialBackoff()
        )
        self._metrics = metrics
        self._clock = clock
        self._queued_at: dict[K, float] = {}
        self._started_at: dict[K, float] = {}
        if metrics is not None:
            metrics.bind(lambda: len(self._queue), self.longest_running)

    def longest_running(self) -> float:
        """Seconds the oldest key in processing has been held (0 when none is). Read by the
        /metrics render in its own thread: one copy of the values, taken in one step, so the
        loop emptying the dict between a check and ``min`` cannot make it raise."""
        started = list(self._started_at.values())
        return max(0.0, self._clock() - min(started)) if started else 0.0

    def _enqueue(self, key: K) -> None:
        self._queue.append(key)
        self._queued_at[key] = self._clock()

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, key: K) -> None:
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        if self._metrics is not None:
            self._metrics.added()
        if key in self._processing:
            return
        self._enqueue(key)
        self._wakeup.set()

    def add_after(self, key: K, delay: float) -> None:
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + delay
        current = self._waiting.get(key)
        if current is not None and current <= deadline:
            return
        self._waiting[key] = deadline
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            if handle is not None:
                self._timers.discard(handle)
            if self._waiting.get(key) == deadline:
                del self._waiting[key]
                self.add(key)

        handle = loop.call_at(deadline, fire)
        self._timers.add(handle)

    def add_rate_limited(self, key: K) -> None:
        if self._metrics is not None:
            self._metrics.retried()
        self.add_after(key, self.limiter.when(key))

    def forget(self, key: K) -> None:
        self.limiter.forget(key)

    async def get(self) -> K:
        """Wait for a key and mark it processing. After ``shut_down`` raises ShutDown even if
        keys wait: a stopping operator finishes what is in flight, not what is queued (the
        next leader re-lists and recomputes everything anyway)."""
        while not self._queue or self._shutting_down:
            if self._shutting_down:
                raise ShutDown
            self._wakeup.clear()
            await self._wakeup.wait()
        key = self._queue.popleft()
        self._processing.add(key)
        self._dirty.discard(key)
        now = self._clock()
        self._started_at[key] = now
        queued_at = self._queued_at.pop(key, now)
        if self._metrics is not None:
            self._metrics.waited(now - queued_at)
        return key

    def done(self, key: K) -> None:
        self._processing.discard(key)
        started = self._started_at.pop(key, None)
        if self._metrics is not None and started is not None:
            self._metrics.worked(self._clock() - started)
        if key in self._dirty:
            self._enqueue(key)
            self._wakeup.set()

    def shut_down(self) -> None:
        """Stop accepting keys; idle workers get ``ShutDown``, busy ones finish their key."""
        self._shutting_down = True
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        self._waiting.clear()
        self._wakeup.set()
