"""A client-side rate limit on the operator's Kubernetes writes (a token bucket, as client-go's
QPS and burst), so a burst of thousands of queued jobs, or a thousand groups writing status,
cannot flood the API server that every other controller in the cluster shares.

Fair between tenants: writes wait in one queue per key (the namespace), and the bucket's
tokens go round-robin across the keys that wait, whatever the writes are. One group creating
2,000 runners then delays another namespace's first write (a create, a safe-to-evict mark, a
delete, a status patch, a finalizer release) by about one token, not by the whole burst.

Within a namespace, runner Job creates come first (``urgent``): a waiting create takes its
namespace's next turn before a status patch or Event of that namespace, so the writes that
only report never delay a runner of their own tenant. (Until issue 36 creates of every
namespace went first, so one tenant's creates held back every other tenant's writes.)

Every wait has a deadline (``deadline``, 30 s by default): past it the write is not made and
:class:`NoWriteToken` says so, so no caller waits for a token without end.

No background task: the first waiter paces the bucket and hands each token to the next key
in turn; when its own turn comes, it passes that role to another waiter.

Fair turns for tokens are not enough while tokens are plenty: the burst let one tenant's
first passes put 200 writes at the API server at once (and in the client's connection
queue, first come first served), and another tenant's runner create waited behind them
(up to 1.4 s under issue 45's attacks). So a namespace also has at most
``WRITES_PER_NAMESPACE`` writes in flight (``in_flight``, kit/fair_gate.py): past it, its
own writes wait. And the writes in flight in all are few (``WRITES_AT_ONCE``), a freed place
going to the namespaces that wait in turn: the API server shares its CPU among the requests
it holds, so a runner create sent beside 56 others (seven busy tenants' 8 each, the onset of
issue 45's attacks) was answered only when most of them were, 0.3-0.7 s on the 2-core
testbed. Now it waits for a place among 16, one namespace's turn each.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable

from gitea_runner_operator.kit.bucket import Bucket
from gitea_runner_operator.kit.fair_gate import FairGate

_GRANTED = "granted"
_PACE = "pace"  # the waiter becomes the one that paces the bucket
# How long a write may wait for its token: at the default 100 writes/s, 3,000 writes ahead.
WRITE_WAIT_DEADLINE = 30.0
# Writes of one namespace in flight at once (from its token to the API server's answer):
# at 10-40 ms an answer, 200-800 writes/s, above the default limit of 100.
WRITES_PER_NAMESPACE = 8
# And in all: at 10-40 ms an answer, 16 in flight still send 400-1,600 writes/s, above the
# default limit of 100; a runner create shares the API server with at most 15 others.
WRITES_AT_ONCE = 16


class NoWriteToken(TimeoutError):
    """No write token came within the deadline: the write was not made."""


class TokenBucket:
    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        *,
        deadline: float | None = WRITE_WAIT_DEADLINE,
        per_namespace: int = WRITES_PER_NAMESPACE,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be > 0 and burst >= 1")
        self._qps = qps
        self._level = Bucket(qps, burst, clock())
        self._clock = clock
        self._sleep = sleep
        self._deadline = deadline
        # key -> its waiters by class (urgent: True); keys with waiters, in round-robin order.
        self._queues: dict[str, dict[bool, deque[asyncio.Future[str]]]] = {}
        self._turns: deque[str] = deque()
        self._pacing = False
        self.waited = 0.0  # seconds the pacer slept for tokens, for tests and benchmarks
        # Each write holds one of its namespace's places until its answer (kube/http.write).
        self.in_flight: FairGate[str] = FairGate(max(WRITES_AT_ONCE, per_namespace), per_namespace)

    def _refill(self) -> None:
        self._level.refill(self._clock())

    def pause(self, seconds: float) -> None:
        """Hand out no token for ``seconds`` (the API server said 429 with Retry-After): the
        bucket goes into debt, and every waiter, whatever its key, waits it out in turn."""
        self._refill()
        self._level.tokens = min(self._level.tokens, 0.0) - seconds * self._qps

    async def acquire(self, key: str = "", *, urgent: bool = False) -> None:
        """Wait for a write token; ``key`` (a namespace) decides whose turn it is, and within
        a key ``urgent`` ones (runner creates) are served first. Raises
        :class:`NoWriteToken` when none came within the deadline."""
        if not self._queues and self._level.take(self._clock()):
            return
        try:
            async with asyncio.timeout(self._deadline):
                await self._wait(key, urgent)
        except TimeoutError:
            raise NoWriteToken(f"no write token within {self._deadline:g} s") from None

    async def _wait(self, key: str, urgent: bool) -> None:
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        queues = self._queues.get(key)
        if queues is None:
            queues = self._queues[key] = {True: deque(), False: deque()}
            self._turns.append(key)
        queues[urgent].append(future)
        pacer = False
        try:
            if self._pacing and await future == _GRANTED:
                return
            pacer = self._pacing = True
            await self._pace(future)
        except BaseException:
            self._discard(key, urgent, future)
            handed = future.done() and not future.cancelled() and future.result() == _PACE
            if pacer or handed:
                self._pacing = False
                self._hand_over()
            raise
        self._pacing = False
        self._hand_over()

    async def _pace(self, mine: asyncio.Future[str]) -> None:
        """Hand out tokens in turn until it is this waiter's own."""
        while True:
            self._refill()
            if self._level.tokens < 1:
                wait = (1 - self._level.tokens) / self._qps
                self.waited += wait
                await self._sleep(wait)
                self._refill()
                if self._level.tokens < 1 - 1e-6:
                    continue  # paused meanwhile (the API server's 429): wait out the debt
                # The wait was for one token: rounding must not make it sleep again.
                self._level.tokens = max(self._level.tokens, 1.0)
            nxt = self._next(mine)
            if nxt is None:
                return
            self._level.tokens -= 1
            if nxt is mine:
                return
            nxt.set_result(_GRANTED)

    def _next(self, mine: asyncio.Future[str]) -> asyncio.Future[str] | None:
        """The first live waiter of the next key in turn, its urgent ones first (the pacer's
        own future counts as live: it may hold the hand-over mark)."""
        while self._turns:
            key = self._turns.popleft()
            queues = self._queues[key]
            future = (queues[True] or queues[False]).popleft()
            if queues[True] or queues[False]:
                self._turns.append(key)
            else:
                del self._queues[key]
            if future is mine or not future.done():
                return future
        return None

    def _hand_over(self) -> None:
        """Make some waiter the pacer, or none if nobody waits."""
        for queues in self._queues.values():
            for queue in queues.values():
                for future in queue:
                    if not future.done():
                        self._pacing = True
                        future.set_result(_PACE)
                        return

    def _discard(self, key: str, urgent: bool, future: asyncio.Future[str]) -> None:
        queues = self._queues.get(key)
        if queues is None or future not in queues[urgent]:
            return
        queues[urgent].remove(future)
        if not queues[True] and not queues[False]:
            del self._queues[key]
            self._turns.remove(key)
