"""Queued jobs that no RunnerGroup will ever serve, decided from plain data.

With ephemeral runners no runner is online while a job waits, so Gitea says "no runner
matches" for every waiting job, and says nothing useful about the one that truly matches
none. The operator reads every queued job of the scopes it observes, so it can tell: a job
is *unmatched* when no group of its Gitea both covers its repository and offers every label
of its ``runs-on``. The rules are the ones the accounting uses (:class:`Claimant.covers`,
:class:`Claimant.can_run`), so "unmatched" here means exactly "counted by no group" there.

Two causes, told apart because they are fixed by different people:
- ``labels``: no group of that Gitea offers the label set at all (a typo such as
  ``ubuntu-lastest``, or a label nobody provides): the workflow's author fixes ``runs-on``;
- ``scope``: groups offer the labels, but none covers the job's repository: the platform
  team widens a scope or adds a group.
"""

from __future__ import annotations

import datetime as dt
import difflib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gitea_runner_operator.api.gitea import ActionJob, Unserved
from gitea_runner_operator.api.scope import ScopeIndex
from gitea_runner_operator.reconcile.capacity.accounting import Claimant, Repository, job_repository

# Label sets per Gitea shown in metrics on their own; the rest add up in OTHER. Only these
# are described (nearest label, groups offering it) and warned about: a Gitea listing 25,000
# jobs with a label each costs 20 descriptions per evaluation, not 25,000.
MAX_LABEL_SETS = 20
# Offered labels a typo is compared with: the most offered ones (ties by name), so the
# nearest-label search costs the same beside 10 groups or 1,000 groups of 64 labels.
MAX_NEAREST_CANDIDATES = 256
OTHER = "other"
MAX_LABEL_TEXT = 120
# Gitea stamps unclaimed times as the zero time; anything before this is "unknown".
_REAL_TIME = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


class Cause(StrEnum):
    LABELS = "labels"  # no group of that Gitea offers every runs-on label
    SCOPE = "scope"  # some group offers the labels, none covers the job's repository


@dataclass(frozen=True, slots=True)
class Sighting:
    """One group's latest list of queued jobs (its scope's, as its token sees them)."""

    url: str  # normalised Gitea URL
    observer: str  # the group's namespace/name
    jobs: Sequence[ActionJob]
    # Queued jobs its listing only counted: no group of the Gitea could run them when it
    # was read (forge/unserved.py); by label set, with the oldest as example.
    unserved: Sequence[Unserved] = ()


@dataclass(frozen=True, slots=True)
class Offer:
    """What one group can serve: its Gitea and its claimant (scope and labels)."""

    url: str
    claimant: Claimant


@dataclass(frozen=True, slots=True)
class UnmatchedSet:
    """The unmatched queued jobs of one Gitea with one label set."""

    url: str
    labels: tuple[str, ...]  # sorted
    cause: Cause
    jobs: tuple[ActionJob, ...]  # oldest (lowest id) first
    observers: frozenset[str]  # the groups whose observation listed one of them
    # (asked, nearest offered) for each label no group of that Gitea offers, when one is close.
    nearest: tuple[tuple[str, str], ...] = ()
    # Groups that offer the labels but whose scope misses the repositories (cause scope).
    offered_by: tuple[str, ...] = ()
    # Per observer: how many of the jobs it listed, and the oldest of them. An Event on a
    # group speaks of what that group listed, never of another tenant's repositories.
    seen: tuple[tuple[str, int, ActionJob], ...] = ()
    # One of its Gitea's MAX_LABEL_SETS largest sets: described (nearest, offered_by) and
    # warned about; the others only count in the metric.
    detailed: bool = True
    # Jobs counted beyond ``jobs``: listings drop the jobs no group could run and keep only
    # their count and oldest (forge/unserved.py).
    extra: int = 0

    @property
    def count(self) -> int:
        """How many queued jobs the set holds."""
        return len(self.jobs) + self.extra

    @property
    def label_text(self) -> str:
        return label_text(self.labels)

    def oldest_created(self) -> dt.datetime | None:
        times = [t for j in self.jobs if (t := real_time(j.created_at)) is not None]
        return min(times, default=None)


def label_text(labels: Iterable[str]) -> str:
    """A label set as one bounded metric label value: sorted, comma-joined."""
    text = ",".join(sorted(labels)) or "(none)"
    return text if len(text) <= MAX_LABEL_TEXT else text[: MAX_LABEL_TEXT - 3] + "..."


def real_time(value: dt.datetime | None) -> dt.datetime | None:
    """Gitea's timestamp, or None for the zero time it gives what has not happened."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value if value >= _REAL_TIME else None


def nearest_label(label: str, offered: Iterable[str]) -> str | None:
    """The offered label a typo most likely meant (``ubuntu-lastest`` -> ``ubuntu-latest``).
    The bar is high on purpose: a shared prefix alone (``gro-gpu``, ``gro-linux``: 0.63) is
    not a typo, and a wrong hint sends a user after the wrong fix."""
    close = difflib.get_close_matches(label, sorted(set(offered)), n=1, cutoff=0.75)
    return close[0] if close else None


def find_unmatched(
    sightings: Iterable[Sighting], offers: Iterable[Offer], detail: int = MAX_LABEL_SETS
) -> list[UnmatchedSet]:
    """Every queued job of the sightings that no offer of its Gitea can serve, by label set.
    A job listed by several groups counts once; every group that listed it is an observer.
    Only the ``detail`` largest sets of each Gitea (the ones the metric shows on their own)
    are described, so the work past counting jobs is bounded whatever the queue holds."""
    by_url: dict[str, list[Claimant]] = {}
    # Per Gitea and label, the groups offering it: a job's candidates are those offering its
    # rarest label, so the cost grows with the groups that could matter, not with all.
    by_label: dict[tuple[str, str], list[Claimant]] = {}
    for offer in offers:
        by_url.setdefault(offer.url, []).append(offer.claimant)
        for label in offer.claimant.offered:
            by_label.setdefault((offer.url, label), []).append(offer.claimant)
    jobs: dict[tuple[str, int], ActionJob] = {}
    observers: dict[tuple[str, int], set[str]] = {}
    # Per (Gitea, label set): the jobs listings only counted. Two groups listing one scope
    # count the same jobs, so the largest count stands, not their sum.
    unserved: dict[tuple[str, tuple[str, ...]], tuple[int, ActionJob, dict[str, int]]] = {}
    for sighting in sightings:
        for u in sighting.unserved:
            key = (sighting.url, u.labels)
            count, example, by = unserved.get(key, (0, u.example, {}))
            by[sighting.observer] = max(by.get(sighting.observer, 0), u.count)
            oldest = example if example.id <= u.example.id else u.example
            unserved[key] = (max(count, u.count), oldest, by)
        for job in sighting.jobs:
            if job.status != "queued":
                continue
            jobs.setdefault((sighting.url, job.id), job)
            observers.setdefault((sighting.url, job.id), set()).add(sighting.observer)
    verdicts: dict[tuple[str, frozenset[str], Repository | None], Cause | None] = {}
    able_for: dict[tuple[str, frozenset[str]], _Able] = {}
    found: dict[
        tuple[str, tuple[str, ...]], tuple[Cause, list[ActionJob], dict[str, tuple[int, ActionJob]]]
    ] = {}

    def verdict(url: str, job: ActionJob) -> Cause | None:
        labels, repository = frozenset(job.labels), job_repository(job)
        pair = (url, labels, repository)
        if pair not in verdicts:
            able = able_for.get((url, labels))
            if able is None:  # once per label set, not per repository (1,000 repositories)
                some = min(
                    (by_label.get((url, label), []) for label in labels),
                    key=len,
                    default=by_url.get(url, []),
                )
                able = able_for[(url, labels)] = _Able([c for c in some if c.can_run(job)])
            verdicts[pair] = able.cause(repository)
        return verdicts[pair]

    for (url, job_id), job in sorted(jobs.items(), key=lambda item: item[0][1]):
        labels = frozenset(job.labels)
        cause = verdict(url, job)
        if cause is None:
            continue
        key = (url, tuple(sorted(labels)))
        entry = found.setdefault(key, (cause, [], {}))
        entry[1].append(job)
        for observer in observers[(url, job_id)]:
            n, first = entry[2].get(observer, (0, job))
            entry[2][observer] = (n + 1, first)
    extra: dict[tuple[str, tuple[str, ...]], int] = {}
    for (url, names), (count, example, by) in unserved.items():
        cause = verdict(url, example)  # the offers now: a group may offer them since
        if cause is None:
            continue
        entry = found.setdefault((url, names), (cause, [], {}))
        if not entry[1] or example.id < entry[1][0].id:
            entry[1].insert(0, example)  # oldest first
        extra[(url, names)] = max(0, count - len(entry[1]))
        for observer, n in by.items():
            listed_n, first = entry[2].get(observer, (0, example))
            oldest = first if first.id <= example.id else example
            entry[2][observer] = (max(listed_n, n), oldest)
    ranked: dict[str, list[tuple[int, str, tuple[str, ...]]]] = {}
    for (url, names), (_, listed, _) in found.items():
        count = len(listed) + extra.get((url, names), 0)
        ranked.setdefault(url, []).append((-count, label_text(names), names))
    described = {
        (url, names)
        for url, sets in ranked.items()
        for _, _, names in sorted(sets)[: max(0, detail)]
    }
    typos = {url: _Typos(by_url.get(url, [])) for url, _ in described}
    out = []
    for (url, names), (cause, listed, seen) in sorted(found.items()):
        detailed = (url, names) in described
        claimants = by_url.get(url, []) if detailed else []
        out.append(
            UnmatchedSet(
                url=url,
                labels=names,
                cause=cause,
                jobs=tuple(listed),
                observers=frozenset(seen),
                seen=tuple((key, n, first) for key, (n, first) in sorted(seen.items())),
                nearest=typos[url].nearest(names) if detailed and cause is Cause.LABELS else (),
                offered_by=tuple(sorted(c.key for c in claimants if frozenset(names) <= c.offered)),
                detailed=detailed,
                extra=extra.get((url, names), 0),
            )
        )
    return out


class _Able:
    """The groups of one Gitea that offer one label set, indexed by what they cover, so a
    job's cause is a lookup: the same rule as Claimant.covers."""

    def __init__(self, able: Sequence[Claimant]) -> None:
        self.index: ScopeIndex[str] = ScopeIndex()
        for c in able:
            self.index.add(c.scope, c.org, c.repo, c.key)

    def cause(self, repository: Repository | None) -> Cause | None:
        if not self.index:
            return Cause.LABELS
        return None if self.index.covers(repository) else Cause.SCOPE


class _Typos:
    """The labels one Gitea's groups offer, and the bounded list a typo is compared with:
    the MAX_NEAREST_CANDIDATES most offered (ties by name), built once per evaluation."""

    def __init__(self, claimants: Sequence[Claimant]) -> None:
        counts: Counter[str] = Counter(name for c in claimants for name in c.offered)
        self.offered = frozenset(counts)
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        self.candidates = [name for name, _ in ranked[:MAX_NEAREST_CANDIDATES]]

    def nearest(self, labels: Sequence[str]) -> tuple[tuple[str, str], ...]:
        pairs = []
        for label in labels:
            if label in self.offered:
                continue
            near = nearest_label(label, self.candidates)
            if near is not None:
                pairs.append((label, near))
        return tuple(pairs)


@dataclass(frozen=True, slots=True)
class Bucket:
    """One metric series: a Gitea and a label set (or OTHER)."""

    count: int
    oldest: dt.datetime | None


def buckets(
    sets: Iterable[UnmatchedSet], cap: int = MAX_LABEL_SETS
) -> dict[tuple[str, str], Bucket]:
    """Series for the metric: per Gitea, the ``cap`` label sets with the most jobs (ties by
    name), and every other set added up under OTHER, so series grow with Gitea instances,
    not with the label sets workflows invent."""
    per_url: dict[str, list[UnmatchedSet]] = {}
    for s in sets:
        per_url.setdefault(s.url, []).append(s)
    out: dict[tuple[str, str], Bucket] = {}
    for url, listed in per_url.items():
        listed.sort(key=lambda s: (-s.count, s.label_text))
        for i, s in enumerate(listed):
            key = (url, s.label_text if i < cap else OTHER)
            before = out.get(key)
            out[key] = _add(before, Bucket(s.count, s.oldest_created()))
    return out


def _add(a: Bucket | None, b: Bucket) -> Bucket:
    if a is None:
        return b
    times = [t for t in (a.oldest, b.oldest) if t is not None]
    return Bucket(a.count + b.count, min(times, default=None))


def describe(s: UnmatchedSet, observer: str) -> str:
    """The Event message for the group ``observer`` (namespace/name): the label set, what to
    do, and an example job's URL. It counts and shows only jobs that group listed, and names
    only groups of its own namespace: the others are a count (tenants share a Gitea, not
    their groups' names or repositories)."""
    count, first = next(
        ((n, job) for key, n, job in s.seen if key == observer), (s.count, s.jobs[0])
    )
    example = first.url or f"job {first.id}"
    head = f"{count} queued job(s) with runs-on [{', '.join(s.labels)}] match no RunnerGroup"
    if s.cause is Cause.LABELS:
        hint = "; no group of this Gitea offers " + (
            " ".join(f"{a!r} (did you mean {b!r}?)" for a, b in s.nearest)
            if s.nearest
            else "this label set"
        )
    else:
        namespace = observer.partition("/")[0]
        own = [key for key in s.offered_by if key.partition("/")[0] == namespace]
        names = ", ".join(own[:3]) + (" ..." if len(own) > 3 else "")
        others = len(s.offered_by) - len(own)
        if others:
            names += f"{' and ' if own else ''}{others} group(s) of other namespaces"
        hint = f"; the label set is offered by {names}, whose scope does not cover the job's"
        hint += " repository"
    return f"{head}{hint}. Example: {example}"
