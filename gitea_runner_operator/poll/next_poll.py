"""When a group's next observation starts: the end of its interval, a wake-up, never sooner
than ``min_refresh`` after the last (unless the caller paced the wake-up), and not while its
namespace owes its share of the Gitea read rate (kit/tenant_reads.py).

The poll task (poll/poller.py) decides how long the interval is; this is the waiting, and
the wake-ups and shrinks that cut it short, in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from gitea_runner_operator.api.naming import GroupKey
from gitea_runner_operator.kit.lograte import LogRate
from gitea_runner_operator.kit.tenant_reads import ReadShares

log = structlog.get_logger(__name__)

# One line per namespace a minute says its polls wait for its share of the read rate.
_READ_WAITS = LogRate(60.0)


class NextPoll:
    """``expect_within``: the poll task's announcement of how long its current wait may take
    (poll/task_faults.WatchedTask), so a long wait for the read share is not a hang."""

    def __init__(
        self,
        key: str,
        clock: Callable[[], float],
        min_refresh: float,
        reads: ReadShares | None,
        expect_within: Callable[[float], None],
    ) -> None:
        self._key, self._namespace = key, GroupKey.parse(key).namespace
        self._clock, self._min_refresh = clock, min_refresh
        self._reads, self._expect_within = reads, expect_within
        self._event = asyncio.Event()  # set by a wake-up, and by shrink() to cut a sleep
        self.woken = False  # a wake-up (not a shrink) came since the observation started
        self._asked = False  # a wake-up came since the last observation started
        self._asked_at = 0.0  # when the first of those came (for the wake-up path's spans)
        self._paced = False  # one of those was paced by its caller (wake(paced=True))
        self.until = float("inf")  # when the current sleep ends
        self.wanted_after = float("-inf")  # an answer asked for after this (the latest wake)

    def wake(self, *, paced: bool) -> None:
        """Cut the wait short: the next observation goes as soon as ``min_refresh`` (unless
        ``paced``) and the namespace's share allow."""
        now = self._clock()
        self.wanted_after = max(self.wanted_after, now)
        if not self._asked:
            self._asked, self._asked_at = True, now
        self._paced = self._paced or paced
        self.woken = True
        self._event.set()

    def shrink(self, end: float) -> None:
        """End the current sleep no later than ``end``."""
        self.until = min(self.until, end)
        self._event.set()

    def begin(self) -> tuple[bool, float]:
        """An observation starts now: whether a wake-up asked for it, and when the first
        did; the wake-ups are used up."""
        self._event.clear()
        self.woken = False
        asked, self._asked, self._paced = self._asked, False, False
        return asked, self._asked_at

    def hold(self, asked: bool) -> int:
        """What a poll nobody woke holds of its namespace's read share until its own fetch
        was charged (:meth:`release`): the namespace's groups go one after another."""
        if self._reads is None or asked:
            return 0
        return self._reads.reserve(self._namespace)

    def release(self, held: int) -> None:
        if self._reads is not None:
            self._reads.release(self._namespace, held)

    async def first(self, after: float) -> None:
        """Before a task's first observation: ``after`` seconds (cut by a wake-up), then
        the read share, for a restarted task too (a spec edited): no way around it."""
        if after > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), after)
        await self._read_share()

    async def sleep(self, started: float, delay: float) -> None:
        """Sleep ``delay`` after ``started``, or until woken, but never observe again sooner
        than ``min_refresh`` after the last observation started (unless paced); then, until
        the namespace's share of the read rate allows the poll."""
        self.until = started + delay
        while (remaining := self.until - self._clock()) > 0 and not self.woken:
            self._event.clear()  # set again by a wake-up, or by shrink() with a nearer end
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), remaining)
        self.until = float("inf")
        gap = started + self._min_refresh - self._clock()
        if gap > 0 and not self._paced:
            await asyncio.sleep(gap)
        await self._read_share()

    async def _read_share(self) -> None:
        """Wait while the namespace owes the read rate more than the poll may: a poll nobody
        woke, while it owes anything (a wake-up ends that wait, and the poll goes as a
        woken one); a woken poll, while it owes more than a burst. Nothing awaits after the
        last look, so the first of the namespace's groups to go holds its share before the
        next looks."""
        reads = self._reads
        if reads is None:
            return
        while (wait := reads.wait(self._namespace, woken=self.woken)) > 0:
            self._note_read_wait(reads, wait)
            self._expect_within(wait)
            if self.woken:
                await asyncio.sleep(wait)
                continue
            self._event.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), wait)

    def _note_read_wait(self, reads: ReadShares, wait: float) -> None:
        held = _READ_WAITS.admit(self._namespace)
        if held is not None:
            log.info(
                "namespace past its share of the Gitea read rate: its polls wait",
                namespace=self._namespace,
                group=self._key,
                share_kib_per_second=round(reads.share() / 1024, 1),
                owed_kib=round(reads.owed(self._namespace) / 1024, 1),
                wait_seconds=round(wait, 2),
                held_back=held,
            )
