"""A client-side rate limit on the operator's Kubernetes writes (a token bucket, as client-go's
QPS and burst), so a burst of thousands of queued jobs, or a thousand groups writing status,
cannot flood the API server that every other controller in the cluster shares."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class TokenBucket:
    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be > 0 and burst >= 1")
        self._qps = qps
        self._burst = float(burst)
        self._tokens = float(burst)
        self._clock = clock
        self._last = clock()
        self._lock = asyncio.Lock()
        self.waited = 0.0  # seconds callers spent waiting, for tests and benchmarks

    async def acquire(self) -> None:
        async with self._lock:  # first come, first served
            now = self._clock()
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
            self._last = now
            if self._tokens < 1:
                wait = (1 - self._tokens) / self._qps
                self.waited += wait
                await asyncio.sleep(wait)
                self._last = self._clock()
                self._tokens = 0.0
            else:
                self._tokens -= 1
