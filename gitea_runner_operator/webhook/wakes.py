"""Wake-up pacing: a delivery wakes a group's poll task, but a tenant's own secret must not
make its groups poll Gitea more often than once per ``WAKE_INTERVAL`` on average (a burst of
``WAKE_BURST`` at once). A wake-up beyond that is deferred until the next one is allowed (one
trailing wake), never lost; and only news spends a token (:class:`WakeLimiter`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Final

import structlog

from gitea_runner_operator.kit.bucket import Bucket
from gitea_runner_operator.kit.lru import LRU

log = structlog.get_logger(__name__)

WAKE_INTERVAL: Final = 1.0
# Wake-ups a group may get at once before the interval applies: Gitea sends the deliveries
# of one push one after the other over a few hundred milliseconds, and a job queued after
# the first wake-up's refresh started must not wait for the end of that second. A flood is
# still held to one wake-up a second on average.
WAKE_BURST: Final = 5


class WakeLimiter:
    """At most ``burst`` wake-ups of a group at once and one per ``interval`` on average (a
    token bucket per group: client-go's BucketRateLimiter); one arriving when the group has
    no token left is deferred until the next token is due (coalesced), so the latest news
    still arrives. The first wake-up after a quiet interval is never delayed.

    Only news spends a token. Gitea delivers a job a few hundred milliseconds after queueing
    it, so the refresh woken by a push's first delivery often lists the jobs of the ones
    that follow: a delivery about a queued job the group's latest answer lists (``known``)
    wakes nobody; one that lands while the group's refresh is in flight (``asking``) waits
    for that answer (checked every ``RECHECK`` seconds, at most ``SETTLE_MAX``); and a
    deferred wake-up whose jobs are all listed by the time it is due is dropped."""

    RECHECK: Final = 0.02
    SETTLE_MAX: Final = 1.0
    # Job ids a due wake-up remembers to check against the group's answer; past this many
    # (a burst of signed deliveries within a second) it just wakes, so the set stays small.
    MAX_JOBS: Final = 64

    def __init__(
        self,
        wake: Callable[[str], None],
        interval: float = WAKE_INTERVAL,
        *,
        burst: int = WAKE_BURST,
        known: Callable[[str, int], bool] | None = None,
        asking: Callable[[str], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_groups: int = 100_000,
    ) -> None:
        self._wake = wake
        self._interval = interval
        self._burst = max(1, burst)
        self._known = known
        self._asking = asking
        self._clock = clock
        # Per group: its bucket as last spent. A group not listed has a full bucket; the least
        # recently woken go beyond ``max_groups`` (they are full again by then).
        self._buckets: LRU[str, Bucket] = LRU(max_groups)
        # Per group with a wake-up due: its timer, when the first of its deliveries came,
        # the queued jobs it is for (None: one that no listed job can answer), and whether
        # it waits for a refresh in flight (else for its token).
        self._deferred: dict[str, tuple[asyncio.TimerHandle, float, set[int] | None, bool]] = {}
        self.deferred = 0  # for tests and benchmarks
        self.dropped = 0  # deferred wake-ups whose jobs were all listed when due

    def _available(self, key: str, now: float) -> float:
        if self._interval <= 0:
            return float(self._burst)  # no limit (tests)
        bucket = self._buckets.peek(key)
        return float(self._burst) if bucket is None else bucket.level(now)

    def _ask(self, check: Callable[[], bool], key: str) -> bool:
        try:
            return check()
        except Exception:
            log.exception("checking a delivery's job failed", group=key)
            return False

    def _listed(self, key: str, job_id: int) -> bool:
        known = self._known
        return known is not None and self._ask(lambda: known(key, job_id), key)

    def _in_flight(self, key: str) -> bool:
        asking = self._asking
        return asking is not None and self._ask(lambda: asking(key), key)

    def __call__(self, key: str, job_id: int | None = None) -> bool:
        """Wake ``key`` now or later; ``job_id``: the queued job a delivery is about. False
        when it is no news (the group's latest answer lists that job)."""
        if job_id is not None and self._listed(key, job_id):
            return False
        due = self._deferred.get(key)
        if due is not None:  # a wake-up is already due: it answers this one too
            handle, since, jobs, parked = due
            if jobs is not None and job_id is not None and len(jobs) < self.MAX_JOBS:
                jobs.add(job_id)
            elif jobs is not None:  # no job id, or more than it is worth checking: wake
                self._deferred[key] = (handle, since, None, parked)
            return True
        now = self._clock()
        if job_id is not None and self._in_flight(key):
            self._defer(key, self.RECHECK, now, {job_id}, parked=True)
            return True
        self._spend(key, now, {job_id} if job_id is not None else None, now)
        return True

    def _spend(self, key: str, now: float, jobs: set[int] | None, since: float) -> None:
        tokens = self._available(key, now)
        if tokens >= 1.0:
            self._fire(key, now, tokens)
            return
        self.deferred += 1
        self._defer(key, (1.0 - tokens) * self._interval, since, jobs, parked=False)

    def _defer(
        self, key: str, delay: float, since: float, jobs: set[int] | None, *, parked: bool
    ) -> None:
        handle = asyncio.get_running_loop().call_later(delay, self._trailing, key)
        self._deferred[key] = (handle, since, jobs, parked)

    def _trailing(self, key: str) -> None:
        due = self._deferred.pop(key, None)
        if due is None:
            return
        _, since, jobs, parked = due
        if jobs is not None and all(self._listed(key, job) for job in jobs):
            self.dropped += 1
            return
        now = self._clock()
        if not parked:  # its token is due now
            self._fire(key, now, max(1.0, self._available(key, now)))
        elif jobs is not None and now - since < self.SETTLE_MAX and self._in_flight(key):
            self._defer(key, self.RECHECK, since, jobs, parked=True)  # no answer yet
        else:
            self._spend(key, now, jobs, since)

    def spend(self, key: str) -> bool:
        """Spend one of ``key``'s tokens without waking it here, if it has one: a delivery
        forwarded to the replica serving the group (dispatch.py) is its wake-up, paced as
        one woken here, before it leaves. False: none left (the forward waits for the
        peer's own next poll, as a deferred wake-up here would wait for its token)."""
        now = self._clock()
        tokens = self._available(key, now)
        if tokens < 1.0:
            return False
        if self._interval > 0:
            self._buckets.put(key, Bucket(1.0 / self._interval, self._burst, now, tokens - 1.0))
        return True

    def _fire(self, key: str, now: float, tokens: float) -> None:
        if self._interval > 0:  # else no limit (tests): nothing to remember
            rate = 1.0 / self._interval
            self._buckets.put(key, Bucket(rate, self._burst, now, tokens - 1.0))
        self._wake(key)

    def close(self) -> None:
        for handle, *_ in self._deferred.values():
            handle.cancel()
        self._deferred.clear()
