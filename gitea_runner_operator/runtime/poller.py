"""One asyncio task per RunnerGroup that asks Gitea for demand every ``pollInterval``.

The poller owns the group's latest Snapshot; the reconciler reads it, or asks for a fresh one
when the cluster changed after it was taken. Failures back off (doubling up to 2 minutes, or
as long as Gitea's Retry-After says) so a broken group does not hammer its Gitea.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable

import structlog

from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.runtime.observer import Snapshot

log = structlog.get_logger(__name__)

MAX_BACKOFF = 120.0
ObserveFn = Callable[[str, RunnerGroupSpec], Awaitable[Snapshot]]


def next_delay(interval: float, failures: int, retry_after: float | None) -> float:
    """Seconds until the next poll: the interval when healthy, else exponential backoff."""
    if failures == 0:
        return interval
    if retry_after is not None:
        return max(retry_after, interval)
    return min(MAX_BACKOFF, interval * float(2 ** (failures - 1)))


class GroupPoller:
    def __init__(
        self, key: str, spec: RunnerGroupSpec, observe: ObserveFn, notify: Callable[[str], None]
    ) -> None:
        self.key = key
        self.spec = spec
        self.latest: Snapshot | None = None
        self._namespace = key.split("/", 1)[0]
        self._observe = observe
        self._notify = notify
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    async def refresh(self, newer_than: float = float("-inf")) -> Snapshot:
        """A snapshot whose observation started after ``newer_than`` (monotonic): the latest
        one if it qualifies, else a new one. Serialised, so a reconcile that waits while the
        poll loop is fetching reuses that fetch instead of repeating it."""
        async with self._lock:
            if self.latest is not None and self.latest.started_at > newer_than:
                return self.latest
            snapshot = await self._observe(self._namespace, self.spec)
            self.latest = snapshot
            return snapshot

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=f"poll:{self.key}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        failures = 0
        while True:
            try:
                snapshot = await self.refresh(newer_than=time.monotonic() - 1.0)
            except Exception:
                log.exception("poll failed unexpectedly", group=self.key)
                snapshot = None
            if snapshot is None or snapshot.problem is not None:
                failures += 1
            else:
                failures = 0
            self._notify(self.key)
            retry_after = snapshot.retry_after if snapshot else None
            delay = next_delay(self.spec.poll_interval_seconds, failures, retry_after)
            await asyncio.sleep(delay * random.uniform(0.9, 1.1))  # noqa: S311


class Pollers:
    """Starts, restarts (on spec change) and stops the per-group pollers."""

    def __init__(self, observe: ObserveFn, notify: Callable[[str], None]) -> None:
        self._observe = observe
        self._notify = notify
        self._pollers: dict[str, GroupPoller] = {}

    def get(self, key: str) -> GroupPoller | None:
        return self._pollers.get(key)

    async def ensure(self, key: str, spec: RunnerGroupSpec) -> GroupPoller:
        current = self._pollers.get(key)
        if current is not None and current.spec == spec:
            return current
        if current is not None:
            await current.stop()
        poller = GroupPoller(key, spec, self._observe, self._notify)
        self._pollers[key] = poller
        poller.start()
        return poller

    async def stop(self, key: str) -> None:
        poller = self._pollers.pop(key, None)
        if poller is not None:
            await poller.stop()

    async def stop_all(self) -> None:
        for key in list(self._pollers):
            await self.stop(key)
