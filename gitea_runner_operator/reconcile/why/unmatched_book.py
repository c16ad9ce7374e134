"""What the operator remembers to report unmatched jobs: which Gitea's groups changed their
offer or latest queue, and when it last warned about each label set. The groups themselves
(offer, latest answer) are read from the one book of members the ledger keeps
(reconcile/capacity/members.py).

Each reconcile's claims step tells it what changed of its group; the unmatched jobs of a
Gitea are then recomputed, after the pass, with :func:`unmatched.find_unmatched`, at most once per
``min_interval`` and only when some group of that Gitea reported something new, so a
thousand reconciles a minute cost a few evaluations, not a thousand. A label set is warned
about at most once per ``every`` (an hour): a typo in a busy workflow must not flood the
Events. That memo is capped (``memo_size`` label sets, oldest forgotten first), so a stream
of invented label sets costs bounded memory. The log, which every team shares, gets at most
one ``unmatched jobs`` line per Gitea per ``LOG_EVERY``: a Gitea whose jobs each invent a
label set would otherwise write a line per job.

The evaluation's cost grows with what a tenant's Gitea lists (25,000 queued jobs with a label
each cost 1-2 s), so no pass runs it or waits for it: the book only says which Gitea is due,
and for which namespaces; :mod:`.unmatched_flight` runs the evaluations in the background, one
at a time in a thread of its own, within a CPU budget shared round-robin by namespace.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import structlog

from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.naming import GroupKey
from gitea_runner_operator.kit.lograte import LogRate
from gitea_runner_operator.kit.lru import LRU
from gitea_runner_operator.metrics.why import WhyMetrics
from gitea_runner_operator.reconcile.capacity.accounting import Claimant
from gitea_runner_operator.reconcile.capacity.members import Member, Members
from gitea_runner_operator.reconcile.why.unmatched import (
    Bucket,
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
# Distinct label sets of one Gitea's queued jobs weighed per evaluation (oldest job first): a
# real Gitea's queue holds a few dozen; a Gitea inventing one per job costs this many, not
# 25,000. Jobs of the others are left out of the count, and the log says how many.
MAX_SETS_WEIGHED = 1000


@dataclass(frozen=True, slots=True)
class Verdict:
    """One evaluation of a Gitea: every unmatched set, and those to warn about now."""

    url: str
    sets: tuple[UnmatchedSet, ...]
    warn: tuple[UnmatchedSet, ...]
    # The metric's series (unmatched.buckets), when computed beside the sets.
    series: dict[tuple[str, str], Bucket] | None = field(default=None, compare=False)
    unweighed: int = 0


@dataclass(frozen=True, slots=True)
class Found:
    """What the evaluation computes from plain values, in whatever thread."""

    sets: tuple[UnmatchedSet, ...]
    series: dict[tuple[str, str], Bucket]
    unweighed: int = 0  # queued jobs of label sets past MAX_SETS_WEIGHED: not counted


def evaluation(
    url: str,
    members: Sequence[Member],
    max_sets: int = MAX_SETS_WEIGHED,
    peers: Sequence[Claimant] = (),
) -> Callable[[], Found]:
    """The pure part of an evaluation of one Gitea, ready to run anywhere: it reads only the
    frozen members given, never the book. Only the jobs of the ``max_sets`` label sets
    seen first (oldest job first) are weighed; the others are counted as ``unweighed``.
    ``peers``: groups of that Gitea other replicas serve (``--sharding``), which offer
    what they run though this replica sees none of their answers."""

    def run() -> Found:
        weighed, unweighed = _within(members, max_sets)
        # Jobs of label sets past those the listings kept (forge/unserved.py): counted only.
        unweighed += max((m.answer.unserved_other for m in members if m.answer), default=0)
        sets = tuple(
            find_unmatched(
                (
                    Sighting(url, m.claimant.key, jobs, m.answer.unserved if m.answer else ())
                    for m, jobs in zip(members, weighed, strict=True)
                ),
                [*(Offer(url, m.claimant) for m in members), *(Offer(url, c) for c in peers)],
            )
        )
        return Found(sets, buckets(sets), unweighed)

    return run


def _within(members: Sequence[Member], max_sets: int) -> tuple[list[list[ActionJob]], int]:
    """Each member's queued jobs whose label set is among the first ``max_sets`` distinct
    ones (oldest job first), and how many distinct queued jobs were left out."""
    queued = sorted(
        {j.id: j for m in members for j in _jobs(m) if j.status == "queued"}.values(),
        key=lambda j: j.id,
    )
    sets: set[frozenset[str]] = set()
    left_out: set[int] = set()
    for job in queued:
        labels = frozenset(job.labels)
        if labels in sets:
            continue
        if len(sets) < max_sets:
            sets.add(labels)
        else:
            left_out.add(job.id)
    if not left_out:
        return [list(_jobs(m)) for m in members], 0
    return [[j for j in _jobs(m) if j.id not in left_out] for m in members], len(left_out)


def _jobs(member: Member) -> Sequence[ActionJob]:
    """The jobs of the member's latest answer (none before its first)."""
    return member.answer.jobs if member.answer is not None else ()


def _sighting(member: Member | None) -> tuple[object, ...] | None:
    """What of a member decides the unmatched jobs: its Gitea, its offer (not its runners or
    capacity) and the jobs of its latest answer."""
    if member is None:
        return None
    c = member.claimant
    answer = member.answer
    jobs = tuple(answer.jobs) if answer is not None else ()
    unserved = (answer.unserved, answer.unserved_other) if answer is not None else None
    return (member.url, c.scope, c.org, c.repo, c.offered, jobs, unserved)


@dataclass(eq=False)
class UnmatchedBook:
    """Reads the groups from ``members``; ``every``, ``memo_size``, ``min_interval`` and
    ``max_sets`` pace and bound the evaluations and warnings (module docstring)."""

    members: Members
    _: KW_ONLY
    every: float = WARN_EVERY
    memo_size: int = MEMO_SIZE
    min_interval: float = MIN_INTERVAL
    clock: Callable[[], float] = time.monotonic
    max_sets: int = MAX_SETS_WEIGHED
    # --sharding: the groups of a Gitea that other replicas serve, as offers (their labels
    # and scope, from the layout every replica keeps): a job one of them can run is theirs,
    # not unmatched.
    peers: Callable[[str], Sequence[Claimant]] | None = None
    # Gitea URLs whose inputs changed since evaluated -> whether a group left (then the
    # evaluation is not held back for min_interval)
    _dirty: dict[str, bool] = field(default_factory=dict, init=False)
    # Gitea URL -> the namespaces whose groups changed it since evaluated (first first): the
    # background evaluations take turns by namespace (unmatched_flight.py).
    _asked_by: dict[str, dict[str, None]] = field(default_factory=dict, init=False)
    _evaluated_at: dict[str, float] = field(default_factory=dict, init=False)
    _warned: LRU[tuple[str, tuple[str, ...]], float] = field(init=False)
    log_rate: LogRate = field(init=False)  # per Gitea URL

    def __post_init__(self) -> None:
        self._warned = LRU(self.memo_size)
        self.log_rate = LogRate(LOG_EVERY, clock=self.clock)

    def changed(self, old: Member | None, new: Member | None) -> None:
        """A group's member in the book went from ``old`` to ``new`` (None: it left; its
        Gitea is then evaluated at once, not held back for min_interval)."""
        if _sighting(old) == _sighting(new):
            return
        for member in (old, new):
            if member is not None:
                url = member.url
                self._dirty[url] = self._dirty.get(url, False) or new is None
                namespace = GroupKey.parse(member.claimant.key)[0]
                self._asked_by.setdefault(url, {})[namespace] = None

    def due(self) -> list[tuple[str, bool]]:
        """The Gitea URLs whose inputs changed since evaluated, and whether a group left each
        (then the evaluation is not held back for ``min_interval``)."""
        return sorted(self._dirty.items())

    def asked_by(self, url: str) -> tuple[str, ...]:
        """The namespaces whose groups changed the inputs of ``url`` since it was evaluated."""
        return tuple(self._asked_by.get(url, ()))

    def ready_in(self, url: str) -> float | None:
        """Seconds until ``url`` may be evaluated (0: now), None when nothing changed."""
        force = self._dirty.get(url)
        if force is None:
            return None
        if force:
            return 0.0
        since = self.clock() - self._evaluated_at.get(url, float("-inf"))
        return max(0.0, self.min_interval - since)

    def evaluate(self, url: str, *, force: bool = False) -> Verdict | None:
        """The unmatched jobs of one Gitea, when its inputs changed and the last evaluation is
        ``min_interval`` old (or ``force``); None when nothing is to be published. Computed
        here, on the caller's thread, from the book's members."""
        work = self.start(url, self.members.of_url(url), force=force)
        return None if work is None else self.finish(url, work())

    def start(
        self, url: str, members: Sequence[Member], *, force: bool = False
    ) -> Callable[[], Found] | None:
        """The evaluation of ``url`` over ``members`` (the groups of that Gitea whose offers
        and answers count: an explicit input, so groups served elsewhere may be added), ready
        to run in any thread; None when it is not due. From now on the URL counts as
        evaluated: a change meanwhile makes it due again."""
        ready = self.ready_in(url)
        if ready is None or (ready > 0 and not force):
            return None
        del self._dirty[url]
        self._asked_by.pop(url, None)
        self._evaluated_at[url] = self.clock()
        if not members:
            self._evaluated_at.pop(url, None)
        here = {m.claimant.key for m in members}
        peers = [c for c in self.peers(url) if c.key not in here] if self.peers else []
        return evaluation(url, members, self.max_sets, peers)

    def finish(self, url: str, found: Found) -> Verdict:
        """What to publish of an evaluation of ``url``: its sets, and those to warn about."""
        now = self.clock()
        warn = tuple(s for s in found.sets if s.detailed and self._due(s, now))
        return Verdict(url, found.sets, warn, found.series, found.unweighed)

    def pending(self, url: str) -> bool:
        """Whether an evaluation of ``url`` is due, now or after ``min_interval``."""
        return url in self._dirty

    def _due(self, s: UnmatchedSet, now: float) -> bool:
        key = (s.url, s.labels)
        last = self._warned.peek(key)
        if last is not None and now - last < self.every:
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
    series = verdict.series if verdict.series is not None else buckets(verdict.sets)
    metrics.unmatched(verdict.url, series)
    if verdict.unweighed and log_rate is not None:
        held = log_rate.admit((verdict.url, "unweighed"))
        if held is not None:
            log.warning(
                "queued jobs not weighed for unmatched labels: too many label sets",
                gitea=verdict.url,
                jobs=verdict.unweighed,
                label_sets_weighed=MAX_SETS_WEIGHED,
                held_back=held,
            )
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
