"""What the operator remembers to report unmatched jobs: which Gitea's groups changed their
offer or latest queue, and when it last warned about each label set. The groups themselves
(offer, latest answer) are read from the one book of members the ledger keeps
(reconcile/members.py).

Each reconcile's claims step tells it what changed of its group; the unmatched jobs of a
Gitea are then recomputed, after the pass, with :func:`unmatched.find_unmatched`, at most once per
``min_interval`` and only when some group of that Gitea reported something new, so a
thousand reconciles a minute cost a few evaluations, not a thousand. A label set is warned
about at most once per ``every`` (an hour): a typo in a busy workflow must not flood the
Events. That memo is capped (``memo_size`` label sets, oldest forgotten first), so a stream
of invented label sets costs bounded memory. The log, which every team shares, gets at most
one ``unmatched jobs`` line per Gitea per ``LOG_EVERY``: a Gitea whose jobs each invent a
label set would otherwise write a line per job.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog

from gitea_runner_operator.kit.lograte import LogRate
from gitea_runner_operator.kit.lru import LRU
from gitea_runner_operator.metrics.why import WhyMetrics
from gitea_runner_operator.reconcile.members import Member, Members
from gitea_runner_operator.reconcile.why.unmatched import (
    Offer,
    Sighting,
    UnmatchedSet,
    buckets,
    describe,
    find_unmatched,
)

log = structlog.get_logger(__name__)

WARN_EVERY = 3600.0
MEMO_SIZE = 1024
MIN_INTERVAL = 5.0
LOG_EVERY = 60.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """One evaluation of a Gitea: every unmatched set, and those to warn about now."""

    url: str
    sets: tuple[UnmatchedSet, ...]
    warn: tuple[UnmatchedSet, ...]


def _sighting(member: Member | None) -> tuple[object, ...] | None:
    """What of a member decides the unmatched jobs: its Gitea, its offer (not its runners or
    capacity) and the jobs of its latest answer."""
    if member is None:
        return None
    c = member.claimant
    jobs = tuple(member.answer.jobs) if member.answer is not None else ()
    return (member.url, c.scope, c.org, c.repo, c.offered, jobs)


class UnmatchedBook:
    def __init__(
        self,
        members: Members,
        *,
        every: float = WARN_EVERY,
        memo_size: int = MEMO_SIZE,
        min_interval: float = MIN_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._every = every
        self._min_interval = min_interval
        self._clock = clock
        self._members = members
        # Gitea URLs whose inputs changed since evaluated -> whether a group left (then
        # the evaluation is not held back for min_interval)
        self._dirty: dict[str, bool] = {}
        self._evaluated_at: dict[str, float] = {}
        # Gitea URL -> the one group asked to come back for an evaluation skipped for
        # min_interval: one pass per URL, not one per group (1,000 groups share a Gitea).
        self._retry: dict[str, str] = {}
        self._warned: LRU[tuple[str, tuple[str, ...]], float] = LRU(memo_size)
        self.log_rate = LogRate(LOG_EVERY, clock=clock)  # per Gitea URL

    def changed(self, old: Member | None, new: Member | None) -> None:
        """A group's member in the book went from ``old`` to ``new`` (None: it left; its
        Gitea is then evaluated after the pass at once, not held back for min_interval)."""
        if _sighting(old) == _sighting(new):
            return
        for member in (old, new):
            if member is not None:
                self._dirty[member.url] = self._dirty.get(member.url, False) or new is None

    def due(self) -> list[tuple[str, bool]]:
        """The Gitea URLs to evaluate after a pass, and whether a group left each (then
        the evaluation is not held back for ``min_interval``)."""
        return sorted(self._dirty.items())

    def evaluate(self, url: str, *, force: bool = False) -> Verdict | None:
        """The unmatched jobs of one Gitea, when its inputs changed and the last evaluation is
        ``min_interval`` old (or ``force``); None when nothing is to be published."""
        now = self._clock()
        if url not in self._dirty:
            return None
        if not force and now - self._evaluated_at.get(url, float("-inf")) < self._min_interval:
            return None
        del self._dirty[url]
        self._retry.pop(url, None)
        self._evaluated_at[url] = now
        members = self._members.of_url(url)
        if not members:
            self._evaluated_at.pop(url, None)
        sets = tuple(
            find_unmatched(
                (
                    Sighting(url, m.claimant.key, m.answer.jobs if m.answer is not None else ())
                    for m in members
                ),
                (Offer(url, m.claimant) for m in members),
            )
        )
        return Verdict(url, sets, tuple(s for s in sets if s.detailed and self._due(s, now)))

    def pending(self, url: str) -> bool:
        """Whether an evaluation was skipped for ``min_interval``."""
        return url in self._dirty

    def come_back(self, key: str) -> float | None:
        """When group ``key`` should pass again so that a skipped evaluation of its Gitea
        happens: a reconcile is queued only when something changed, so without this a typo
        label could wait for the next resync. One group per Gitea is asked; None for the
        rest, and when nothing is pending."""
        member = self._members.get(key)
        if member is None or member.url not in self._dirty:
            return None
        owner = self._retry.setdefault(member.url, key)
        if owner != key and owner in self._members:
            return None
        self._retry[member.url] = key
        since = self._clock() - self._evaluated_at.get(member.url, float("-inf"))
        return max(0.0, self._min_interval - since)

    def _due(self, s: UnmatchedSet, now: float) -> bool:
        key = (s.url, s.labels)
        last = self._warned.peek(key)
        if last is not None and now - last < self._every:
            return False
        self._warned.put(key, now)
        return True


# Events name each observer: a job listed by more groups than this warns only the first.
MAX_OBSERVERS_WARNED = 10
EVENT_REASON = "UnmatchedJobs"


async def publish(
    verdict: Verdict,
    metrics: WhyMetrics,
    group_of: Callable[[str], dict[str, Any] | None],
    emit: Callable[[dict[str, Any], str, str, str], Awaitable[None]],
    log_rate: LogRate | None = None,
) -> None:
    """Export a Gitea's unmatched jobs, and warn the groups that observed a set now due;
    ``log_rate`` (per Gitea URL) decides which of those warnings also reach the log."""
    metrics.unmatched(verdict.url, buckets(verdict.sets))
    for s in verdict.warn:
        held = log_rate.admit(verdict.url) if log_rate is not None else 0
        if held is not None:
            log.warning(
                "unmatched jobs",
                gitea=verdict.url,
                labels=s.label_text,
                cause=s.cause.value,
                held_back=held,
            )
        for key in sorted(s.observers)[:MAX_OBSERVERS_WARNED]:
            group = group_of(key)
            if group is not None:
                await emit(group, "Warning", EVENT_REASON, describe(s, key))
