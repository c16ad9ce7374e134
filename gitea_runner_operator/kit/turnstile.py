"""Heavy synchronous steps, one per turn of the event loop, each after the I/O that came in
meanwhile.

The event loop runs its ready callbacks in the order they became ready, and reads new I/O
only once it has run them all. Forty answers of tenants' Gitea servers arriving together
put forty parses (a page of jobs at the caps is a few milliseconds of JSON, depth checks and
validation each) in one turn of the loop, and another tenant's answer that arrives meanwhile
waits for all of them: a healthy runner create's answer read 50-100 ms after the API
server sent it, under issue 45's attacks, with the loop's lag at p99 under 10 ms. Passed
through the turnstile, a heavy step runs only once the loop has turned twice since the last
one, so each turn reads its I/O and runs what it woke before the next heavy step: another
tenant's answer waits for one heavy step, not for every one in flight. Nothing is dropped or
reordered within the heavy steps (first come, first served); a tenant with many heavy
answers waits for its own.

One step per turn is not enough while heavy answers keep coming: a runner create takes ten
or so turns of the loop from its request to its answer read (each await of the client that
yields is one), and with a 5-10 ms page parsed in every turn it took 50-90 ms under issue
45's attacks (the API server's own part at most 25 ms; traced on the loop's thread). So
after a step that took ``d`` the turnstile rests ``REST * d``: heavy steps take at most a
third of the loop's time, and the turns between them are light.

No task and no lock: the loop's own turns (a ``call_soon`` hop, then a timer) open the
turnstile again.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Final

# The turnstile rests this many times a heavy step's duration after it.
REST: Final = 2.0


class Turnstile:
    def __init__(self) -> None:
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._passed = False  # a heavy step passed, and the turnstile has not opened since
        self._passed_at = 0.0
        self.waited = 0  # steps that waited for their turn (tests, benchmarks)

    async def turn(self) -> None:
        """Return when a heavy step may run: at once when the turnstile is open and none
        waits; otherwise once the loop has turned (read its I/O) at least twice and rested
        after the step before."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new loop (tests): the last one's turns never come
            self._loop, self._passed = loop, False
            self._waiting.clear()
        if not self._passed and not self._waiting:
            self._pass(loop)
            return
        self.waited += 1
        future = loop.create_future()
        self._waiting.append(future)
        await future  # a cancelled waiter is skipped when its turn comes (_open)

    def _pass(self, loop: asyncio.AbstractEventLoop) -> None:
        self._passed = True
        self._passed_at = loop.time()
        loop.call_soon(self._rest, loop)  # the next turn: the step has run

    def _rest(self, loop: asyncio.AbstractEventLoop) -> None:
        """Open again after a rest in proportion to the step (a timer: after the I/O of the
        turn it falls in, even when the rest is nothing)."""
        took = loop.time() - self._passed_at
        loop.call_later(REST * took, self._open)

    def _open(self) -> None:
        self._passed = False
        while self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                assert self._loop is not None
                future.set_result(None)  # its step runs in the next turn, before the rest
                self._pass(self._loop)  # begins to be measured
                return
