"""Events aggregated per object, type and reason, as the Kubernetes event recorder does:
the first occurrence creates an Event (in the background); later ones update that Event's ``count``,
``lastTimestamp`` and ``message`` instead of creating new ones.

Why: a group that creates runners in many passes wrote one ``RunnersCreated`` Event per
pass, as many writes as status patches, for a line a user reads once. Here the first
occurrence is written at once (a user watching sees it without delay) and later ones of
the same key are written together, at most once per :data:`FLUSH_EVERY` per key, as one
patch. An Event is reused for :data:`REUSE_FOR` after its last write, like the recorder's
cache; what is held is bounded by :data:`MAX_KEYS` (past it, occurrences are written one
by one, unaggregated, never dropped), and the first creates under way in the background by
:data:`MAX_IN_FLIGHT`: past it, the caller writes its Event itself and waits, so an API
server that answers slowly slows the passes down instead of piling up tasks.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gitea_runner_operator.kit.tasks import STOP_GRACE, finish_or_cancel

FLUSH_EVERY = 30.0
REUSE_FOR = 600.0
MAX_KEYS = 4096
MAX_MESSAGE = 1024
MAX_IN_FLIGHT = 256

# (namespace, object uid or name, type, reason)
EventKey = tuple[str, str, str, str]
Create = Callable[[str, dict[str, Any]], Awaitable[bool]]
Patch = Callable[[str, str, dict[str, Any]], Awaitable[bool]]


def _iso(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).isoformat()


@dataclass(slots=True)
class _Aggregate:
    name: str
    count: int  # occurrences so far, written or not
    written: int  # the count the Event holds
    message: str
    last_at: float  # wall clock of the latest occurrence
    written_at: float  # monotonic: when the Event was last written
    flush: asyncio.TimerHandle | None = None


class EventRecorder:
    """``create(namespace, event)`` and ``patch(namespace, name, patch)`` write; each returns
    False when the write failed (the Event is then created afresh next time)."""

    def __init__(
        self,
        create: Create,
        patch: Patch,
        *,
        flush_every: float = FLUSH_EVERY,
        reuse_for: float = REUSE_FOR,
        max_keys: int = MAX_KEYS,
        max_in_flight: int = MAX_IN_FLIGHT,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._create = create
        self._patch = patch
        self._flush_every = flush_every
        self._reuse_for = reuse_for
        self._max_keys = max_keys
        self._max_in_flight = max_in_flight
        self._clock = clock
        self._wall = wall_clock
        self._held: OrderedDict[EventKey, _Aggregate] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._held)

    async def record(self, event: dict[str, Any]) -> None:
        """``event``: a complete core/v1 Event without name, timestamps or count."""
        meta, obj = event["metadata"], event["involvedObject"]
        namespace = meta["namespace"]
        key = (namespace, obj.get("uid") or obj["name"], event["type"], event["reason"])
        message = str(event.get("message") or "")[:MAX_MESSAGE]
        now, wall = self._clock(), self._wall()
        self._expire(now)
        held = self._held.get(key)
        if held is not None:
            held.count, held.message, held.last_at = held.count + 1, message, wall
            self._held.move_to_end(key)
            if held.flush is None:
                delay = max(0.0, held.written_at + self._flush_every - now)
                loop = asyncio.get_running_loop()
                held.flush = loop.call_later(delay, self._start_flush, key)
            return
        name = f"{obj['name']}.{uuid.uuid4().hex[:16]}"
        body = {
            **event,
            "metadata": {**meta, "name": name},
            "message": message,
            "firstTimestamp": _iso(wall),
            "lastTimestamp": _iso(wall),
            "count": 1,
        }
        if len(self._held) < self._max_keys:
            self._held[key] = _Aggregate(name, 1, 1, message, wall, now)
        # Written by a task of its own, not awaited: a pass that created runners must not
        # wait for its Event (1,001 groups filling at once each waited once, on a slow API
        # server hundreds of milliseconds). Later occurrences aggregate into it meanwhile.
        if len(self._tasks) >= self._max_in_flight:
            await self._create_first(key, namespace, body)
            return
        task = asyncio.create_task(self._create_first(key, namespace, body))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _create_first(self, key: EventKey, namespace: str, body: dict[str, Any]) -> None:
        try:
            written = await self._create(namespace, body)
        except Exception:  # best effort, like every Event: never an unobserved task error
            written = False
        if not written:
            self._forget(key)

    def _expire(self, now: float) -> None:
        """Events not written for ``reuse_for`` with nothing pending: the next occurrence
        creates a new one (oldest first, so this is cheap)."""
        while self._held:
            key, held = next(iter(self._held.items()))
            if held.flush is not None or now - held.written_at < self._reuse_for:
                return
            del self._held[key]

    def _forget(self, key: EventKey) -> None:
        held = self._held.pop(key, None)
        if held is not None and held.flush is not None:
            held.flush.cancel()

    def _start_flush(self, key: EventKey) -> None:
        task = asyncio.create_task(self._flush(key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _flush(self, key: EventKey) -> None:
        held = self._held.get(key)
        if held is None:
            return
        held.flush = None
        if held.count == held.written:
            return
        count, patch = (
            held.count,
            {
                "count": held.count,
                "lastTimestamp": _iso(held.last_at),
                "message": held.message,
            },
        )
        held.written_at = self._clock()
        if await self._patch(key[0], held.name, patch):
            held.written = max(held.written, count)
        else:
            self._forget(key)  # gone (expired by the API server?): the next one creates

    async def close(self, grace: float = STOP_GRACE) -> None:
        """Write what is pending now (a stopping operator), then forget everything."""
        pending = [k for k, h in self._held.items() if h.flush is not None]
        for key in pending:
            held = self._held[key]
            if held.flush is not None:
                held.flush.cancel()
            await self._flush(key)
        await finish_or_cancel(list(self._tasks), grace)  # nor may an API server that never answers
        self._held.clear()
