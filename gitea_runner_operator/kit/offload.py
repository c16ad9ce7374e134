"""Work whose cost a tenant decides, done in a thread of its own instead of on the event loop.

The event loop serves every team, the probes and the Lease's heartbeat; a computation that
grows with what a tenant's Gitea lists or what its ConfigMap holds (the unmatched-jobs
evaluation, the first check of a new ``runnerConfig``) would hold all of them for as long as
it runs. Here it runs in one thread per purpose: the loop then shares the interpreter with
one busy thread (Python hands the lock over every few milliseconds), never waits for it, and
a flood of such work queues in that thread instead of using every core. Calls for the same
key while one is under way share it (:class:`~.singleflight.SingleFlight`): a hundred groups
with the same new config parse it once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from gitea_runner_operator.kit.singleflight import SingleFlight
from gitea_runner_operator.kit.thread_names import name_this_thread

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Offload(Generic[K, V]):
    """``fn`` must read only values nobody changes meanwhile: it runs beside the loop."""

    def __init__(self, name: str) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=name, initializer=name_this_thread
        )
        self._flights: SingleFlight[K, V] = SingleFlight()

    def __contains__(self, key: object) -> bool:
        """Whether work for ``key`` is under way."""
        return key in self._flights

    async def run(self, key: K, fn: Callable[[], V]) -> V:
        """``fn()``, computed in the thread, or the answer of the call under way for ``key``."""

        async def call() -> V:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn)

        return await self._flights.run(key, call)

    async def join(self, key: K) -> None:
        """Wait until no work for ``key`` is under way."""
        await self._flights.join(key)
