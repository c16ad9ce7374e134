"""A group's status patch written after its pass, by one writer per group, so that no
reconcile worker waits for a write token to report what it did.

Status patches wait behind runner creates for the write limit's tokens (kube/ratelimit.py).
While 1,001 groups filled at once, every pass ended awaiting its status patch: the four
workers spent the fill waiting for tokens, the work queue stayed at about 1,000 groups, and
the passes that would have created runners waited behind them. Now a pass hands its status
to the group's writer and returns; the writer patches the latest status handed to it when
a token comes (a newer one replaces one not yet written: the patch is the whole status the
pass computed, so only the latest matters), then the Events that mark the transitions. A
failed patch gives the group back to the work queue (``retry``), whose pass hands the latest
status again; nothing is left pending without a writer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from gitea_runner_operator.kit.tasks import STOP_GRACE, finish_or_cancel

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Patch:
    """One pass's status, with what to do once it is written."""

    digest: int
    write: Callable[[], Awaitable[None]]  # the patch, then its Events


class LaterWrites:
    """The status patches not yet written, one writer task per group with one pending."""

    def __init__(self, retry: Callable[[str], None] | None = None) -> None:
        self._retry = retry
        self._pending: dict[str, Patch] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def pending(self, key: str) -> Patch | None:
        """The status handed over for ``key`` and not yet being written."""
        return self._pending.get(key)

    def hand(self, key: str, patch: Patch) -> None:
        """Write ``patch`` soon, replacing one for ``key`` not yet started."""
        self._pending[key] = patch
        if key not in self._tasks:
            self._tasks[key] = asyncio.create_task(self._drain(key), name=f"status:{key}")

    async def _drain(self, key: str) -> None:
        try:
            while (patch := self._pending.pop(key, None)) is not None:
                try:
                    await patch.write()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning(
                        "status write failed, will retry",
                        group=key,
                        error=f"{type(exc).__name__}: {exc}",
                    )
                    # A newer status handed meanwhile is dropped too, not left pending
                    # with no writer: the retry pass computes the latest and hands it
                    # again (while one is pending, a pass with the same status hands
                    # nothing, taking it as on its way).
                    self._pending.pop(key, None)
                    if self._retry is not None:
                        self._retry(key)
                    return
        finally:
            if self._tasks.get(key) is asyncio.current_task():
                del self._tasks[key]

    def forget(self, key: str) -> None:
        """The group is gone: its pending patch is dropped, its writer cancelled."""
        self._pending.pop(key, None)
        task = self._tasks.pop(key, None)
        if task is not None:
            task.cancel()

    def knows(self, key: str) -> bool:
        return key in self._pending or key in self._tasks

    async def close(self, grace: float = STOP_GRACE) -> None:
        """Let the writes under way finish (at most ``grace`` seconds), then cancel the rest:
        no writer outlives the controller."""
        await finish_or_cancel(self._tasks.values(), grace)
        self._pending.clear()
        self._tasks.clear()
