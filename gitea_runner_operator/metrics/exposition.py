"""What ``GET /metrics`` answers: a body rendered at most once per interval, by one render
that concurrent scrapes share, in a thread.

Rendering every series of 1,000 groups takes the better part of a second of Python. On the
event loop, each scrape held every group, the probes and (before it had a thread of its own)
the Lease for that long, and anyone who reaches the port can scrape in a loop. Prometheus
scrapes every 15 s or more, so a body a few seconds old tells it nothing less; the loop's
share of a scrape is then handing out bytes it already has.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Final

from gitea_runner_operator.kit.singleflight import SingleFlight

# Seconds a rendered body is served before the next scrape renders again.
RENDER_EVERY: Final = 5.0


class SharedRender:
    """``render`` must be safe to call from another thread (prometheus_client's is: every
    metric takes its own lock while it is read)."""

    def __init__(
        self,
        render: Callable[[], bytes],
        every: float = RENDER_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._render = render
        self._every = every
        self._clock = clock
        self._body: bytes | None = None
        self._at = 0.0
        self._renders: SingleFlight[None, bytes] = SingleFlight()

    async def body(self) -> bytes:
        if self._body is not None and self._clock() - self._at < self._every:
            return self._body
        # A scraper that goes away does not cancel the render the others wait for.
        return await self._renders.run(None, self._fresh)

    async def _fresh(self) -> bytes:
        started = self._clock()
        body = await asyncio.to_thread(self._render)
        self._body, self._at = body, started
        return body
