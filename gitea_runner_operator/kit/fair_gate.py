"""Concurrency shared fairly by key: at most ``slots`` holders at once, at most ``per_key`` of
one key, and a freed slot goes to the keys that wait in turn (round-robin), not in arrival
order.

Why a cap per key, and not only fair turns: the event loop runs ready callbacks in the order
they became ready. Forty Gitea answers of one tenant arriving together put forty callbacks
(reads, parses) ahead of another tenant's one, however fairly the requests were started. A
key that may hold only ``per_key`` requests at once puts at most that many ahead of anyone
else's; past it, its own requests wait, so a tenant with many groups slows its own groups,
not the others. A request waiting for an answer that never comes holds its key's place, so
a hung server costs its own tenant only.

No background task and no lock: the holder that leaves hands its slot on, between awaits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class FairGate(Generic[K]):
    def __init__(self, slots: int, per_key: int) -> None:
        if slots < 1 or per_key < 1:
            raise ValueError("slots and per_key must be at least 1")
        self.slots = slots
        self.per_key = per_key
        self.held: dict[K, int] = {}  # key -> slots it holds now
        self.in_use = 0  # slots held now, by every key
        self._waiting: dict[K, deque[asyncio.Future[None]]] = {}
        self._turns: deque[K] = deque()  # keys with waiters, the next to be served first
        # The most places one key held at once, over every key (tests, benchmarks): one
        # figure, not one per key, so namespaces that come and go leave nothing behind.
        self.most_held = 0

    def _free_for(self, key: K) -> bool:
        return self.in_use < self.slots and self.held.get(key, 0) < self.per_key

    @contextlib.asynccontextmanager
    async def turn(self, key: K) -> AsyncIterator[None]:
        """Hold one of ``key``'s places for the body of the ``async with``."""
        if key not in self._waiting and self._free_for(key):
            self._take(key)
        else:
            await self._wait(key)
        try:
            yield
        finally:
            self._leave(key)

    def _take(self, key: K) -> None:
        self.in_use += 1
        held = self.held[key] = self.held.get(key, 0) + 1
        self.most_held = max(self.most_held, held)

    async def _wait(self, key: K) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._waiting.get(key)
        if queue is None:
            queue = self._waiting[key] = deque()
            self._turns.append(key)
        queue.append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._leave(key)  # granted as it was cancelled: give the place back
            else:
                with contextlib.suppress(ValueError):  # not handed on yet: leave the queue
                    queue.remove(future)
                if not queue and self._waiting.get(key) is queue:
                    del self._waiting[key]
                    self._turns.remove(key)
            raise

    def _leave(self, key: K) -> None:
        self.in_use -= 1
        held = self.held[key] - 1
        if held:
            self.held[key] = held
        else:
            del self.held[key]
        self._hand_on()

    def _hand_on(self) -> None:
        """Grant free slots to waiters, one key at a time in turn, skipping keys that hold
        their ``per_key`` already (they keep their place in the turn)."""
        while self.in_use < self.slots:
            key = next((k for k in self._turns if self.held.get(k, 0) < self.per_key), None)
            if key is None:
                return
            queue = self._waiting[key]
            future = queue.popleft()
            self._turns.remove(key)
            if queue:
                self._turns.append(key)  # served: to the back of the turn
            else:
                del self._waiting[key]
            if future.done():
                continue  # its waiter was cancelled meanwhile
            self._take(key)
            future.set_result(None)
