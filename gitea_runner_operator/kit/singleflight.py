"""The one single-flight: callers that ask for the same key while its call is under way
share that call instead of each making their own.

Written once for the Secret reads (kube/secret_store.py), the scrape reviews
(kube/reviews.py), the /metrics render (metrics/exposition.py) and the work a tenant's
input costs, done in a thread (kit/offload.py). Each waiter is shielded:
one that gives up (its poll cancelled, its scraper gone) does not cancel the call the others
wait for. Gitea observations share theirs in forge/observe's own way, because a recent
finished answer serves there too and the last waiter to leave cancels the request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SingleFlight(Generic[K, V]):
    def __init__(self) -> None:
        self._running: dict[K, asyncio.Task[V]] = {}

    def __len__(self) -> int:
        return len(self._running)

    def __contains__(self, key: object) -> bool:
        return key in self._running

    async def run(
        self,
        key: K,
        call: Callable[[], Coroutine[Any, Any, V]],
        *,
        settled: Callable[[], object] | None = None,
    ) -> V:
        """``call()``'s answer, from the call under way for ``key`` or a new one.
        ``settled``: run once the new call has ended, unless :meth:`forget` came first."""
        task = self._running.get(key)
        if task is None:
            task = asyncio.create_task(call())
            self._running[key] = task
            task.add_done_callback(lambda done: self._settled(key, done, settled))
        return await asyncio.shield(task)

    async def join(self, key: K) -> None:
        """Wait for the call under way for ``key`` to end (at once when there is none),
        whatever its outcome; the call is not shared, so nothing is raised."""
        task = self._running.get(key)
        if task is not None:
            await asyncio.wait([task])

    def forget(self, key: K) -> None:
        """The next caller starts a new call; the one under way still answers its waiters."""
        self._running.pop(key, None)

    def _settled(self, key: K, task: asyncio.Task[V], settled: Callable[[], object] | None) -> None:
        if self._running.get(key) is task:
            del self._running[key]
            if settled is not None:
                settled()
        if not task.cancelled():
            task.exception()  # retrieved: every waiter may have given up before it failed
