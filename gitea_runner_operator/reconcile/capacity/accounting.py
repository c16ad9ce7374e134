"""Exact accounting across RunnerGroups: each queued job is counted for exactly one group.

Several groups may be able to serve the same job: an org-scope group and a repo-scope group
of that org, with the same labels; or two teams' groups on one instance. If each counted it,
each would start a runner for it, and all but one would idle until reaped. Instead, among the
groups of one Gitea instance whose scope covers the job's repository (from the job's ``url``)
and whose labels cover its ``runs-on``, one is chosen by a fixed rule:

1. the most specific scope first (repo, then org, then global): the job's own team first;
2. then the group with the most spare capacity (``maxActiveRunners`` minus alive runners);
3. then the group's ``namespace/name``, so every replica and every restart agrees.

Jobs are first covered by the starting and idle runners that exist (each will take one), in
the order of that rule, then by spare capacity in the same order; a job whose first choice
is full spills to the next. A job no group has room for is counted for its first choice,
which then shows ``AtCapacity``. A group that cannot create now (backing off, refused by
quota, not Ready) has no spare capacity here, so it never holds jobs a healthy peer could run.

Pure: the same inputs give the same assignment everywhere. The cost is linear in jobs and
groups: candidates are looked up once per distinct (labels, repository) pair through an index
by scope, never by trying every group against every job. :mod:`.ledger` decides when to run
it and hands each group its share.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from gitea_runner_operator.api.gitea import ActionJob, Unserved
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec, Scope
from gitea_runner_operator.api.scope import (
    ScopeIndex,
    fold,
    labels_fit,
    repository_in_url,
    repository_part,
    scope_covers,
)

_SPECIFICITY = {Scope.REPO: 2, Scope.ORG: 1, Scope.GLOBAL: 0}

Repository = tuple[str, str]  # (owner, name), lower-cased


@dataclass(frozen=True, slots=True)
class Claimant:
    """One group, as the assignment sees it."""

    key: str  # namespace/name
    scope: Scope
    org: str | None
    repo: str | None
    offered: frozenset[str]
    not_busy: int  # starting and idle runners (and recent finishes): each may take one job
    spare: int  # maxActiveRunners - alive runners; 0 when the group cannot create now
    # When each busy runner was first seen busy (its group's answer's ``started_at``): one
    # that turned busy after a peer's answer may have taken a job that answer still lists.
    busy_since: tuple[float, ...] = ()
    # Of ``not_busy``, the runners made recently (scaling.RACE_HOLD): they may not have
    # asked Gitea for their job yet, so a wider runner started now could take it (races.py).
    young: int = 0

    @classmethod
    def of(
        cls,
        key: str,
        spec: RunnerGroupSpec,
        *,
        not_busy: int,
        alive: int,
        blocked: bool,
        busy_since: tuple[float, ...] = (),
        young: int = 0,
    ) -> Claimant:
        """What a group offers (its scope and labels, from its spec) and its room. The one
        builder for the reconcile and for ``why``, so both weigh a group alike: a group that
        cannot create now (``blocked``) has no spare capacity."""
        return cls(
            key=key,
            scope=spec.scope,
            org=spec.org,
            repo=spec.repo,
            offered=spec.label_names,
            not_busy=not_busy,
            spare=0 if blocked else spec.max_active_runners - alive,
            busy_since=busy_since,
            young=young,
        )

    def covers(self, repository: Repository | None) -> bool:
        """Whether this group's runners can take jobs of that repository. A job whose
        repository is unknown is taken to be in scope (only the group that listed it sees
        it, and its scope is where it came from)."""
        return repository is None or scope_covers(self.scope, self.org, self.repo, *repository)

    def can_run(self, job: ActionJob) -> bool:
        return labels_fit(job.labels, self.offered)


@dataclass(frozen=True, slots=True)
class Answer:
    """One group's latest Gitea answer. ``sees`` lists the repositories its token is known to
    read; None means every repository of its scope (a repo or global scope: the token could
    not have answered otherwise). On Gitea 1.27 an org-scope token lists only the jobs of
    repositories it can read, so its silence about any other repository proves nothing."""

    key: str
    started_at: float
    jobs: Sequence[ActionJob]
    sees: frozenset[int] | None = None  # seen_key of each repository
    # Queued jobs no group of the Gitea could run, only counted (forge/unserved.py): for the
    # unmatched-jobs evaluation, never for accounting.
    unserved: tuple[Unserved, ...] = ()
    unserved_other: int = 0

    def can_see(self, repository: Repository | None) -> bool:
        return self.sees is None or (repository is not None and seen_key(repository) in self.sees)


def seen_key(repository: Repository) -> int:
    """What the ledger keeps of a repository a token is known to read: the tuple's hash, a
    small int instead of two strings of up to 140 characters (200,000 learned repositories
    took 86 MiB as tuples, 2 to 3 times the bound documented; see ledger.MAX_SEEN_TOTAL).
    Python's string hashing is keyed per process, so a tenant cannot choose names that
    collide; a collision by chance would only make one repository look readable."""
    return hash(repository)


# The memo holds at most this many keys of at most this many characters: under 4 MiB
# whatever URLs a Gitea answers (each is capped at 2 KiB, api/caps.py; ~500 KiB ones once
# held 352 MiB here). A key is a repository's part of the URL, so 4,096 is repositories.
MEMO_ENTRIES = 4096
MEMO_KEY_MAX_CHARS = 512


def job_repository(job: ActionJob) -> Repository | None:
    """``(owner, repo)`` lower-cased from the job's API URL; Gitea's job payload has no repo
    field. Runs for every listed job on every assignment: parsed once per repository
    (bounded in entries and bytes); a part too long to memoise is parsed each time."""
    part = repository_part(job.url or "")
    if len(part) > MEMO_KEY_MAX_CHARS:
        return _parse_repository(part)
    return _repository_of(part)


def _parse_repository(part: str) -> Repository | None:
    found = repository_in_url(part)
    return (fold(found[0]), fold(found[1])) if found is not None else None


_repository_of = lru_cache(maxsize=MEMO_ENTRIES)(_parse_repository)


def overlaps(a: Claimant, b: Claimant) -> bool:
    """Whether some job could be counted by both groups."""
    if not a.offered & b.offered:
        return False
    for x, y in ((a, b), (b, a)):
        if x.scope is Scope.GLOBAL:
            return True
        if x.scope is Scope.ORG and fold(x.org) == fold(y.org):
            return True
    return (
        a.scope is Scope.REPO
        and b.scope is Scope.REPO
        and fold(a.org) == fold(b.org)
        and fold(a.repo) == fold(b.repo)
    )


def _rank(c: Claimant) -> tuple[int, int, str]:
    return (-_SPECIFICITY[c.scope], -max(0, c.spare), c.key)


def _index(claimants: Iterable[Claimant]) -> ScopeIndex[Claimant]:
    index: ScopeIndex[Claimant] = ScopeIndex()
    for c in claimants:
        index.add(c.scope, c.org, c.repo, c)
    return index


@dataclass(frozen=True, slots=True)
class Assignment:
    """Which group counts each job, and what :mod:`.races` needs to keep wider runners off
    the jobs narrower ones were made for."""

    shares: dict[str, list[ActionJob]]  # each list in id order (oldest first)
    # Jobs whose runner may not have asked Gitea yet: covered by a young runner of their
    # holder, or to be created for (its spare capacity). Not those nobody has room for.
    on_the_way: frozenset[int]
    # job id -> the groups that could run it, best first (only jobs some group can run)
    candidates: dict[int, list[Claimant]]


def assign(jobs: Iterable[ActionJob], claimants: Sequence[Claimant]) -> dict[str, list[ActionJob]]:
    """Which queued jobs each group counts as its demand (:func:`assignment`)."""
    return assignment(jobs, claimants).shares


def assignment(jobs: Iterable[ActionJob], claimants: Sequence[Claimant]) -> Assignment:
    """Which queued jobs each group counts as its demand. Every job that at least one group
    can run is counted exactly once; jobs no group can run are counted by none.

    Runners that exist cover jobs first, in whichever group they are (a starting or idle
    runner will take one); only then does spare capacity count, so a group that started
    runners for jobs before another group appeared is not joined by a second set. A group's
    older runners cover its oldest jobs (they asked Gitea first), its young ones the next."""
    index = _index(claimants)
    covering = {c.key: max(0, c.not_busy) for c in claimants}
    settled = {c.key: max(0, c.not_busy - c.young) for c in claimants}
    spare = {c.key: max(0, c.spare) for c in claimants}
    assigned: dict[str, list[ActionJob]] = {c.key: [] for c in claimants}
    on_the_way: set[int] = set()
    unique = {job.id: job for job in jobs if job.status == "queued"}
    # Candidates depend only on the job's labels and repository: computed once per pair.
    ranked_for: dict[tuple[frozenset[str], Repository | None], list[Claimant]] = {}
    candidates_of: dict[int, list[Claimant]] = {}
    for job_id, job in unique.items():
        labels = frozenset(job.labels)
        repository = job_repository(job)
        pair = (labels, repository)
        ranked = ranked_for.get(pair)
        if ranked is None:
            ranked = sorted(
                (c for c in index.covering(repository) if labels_fit(labels, c.offered)),
                key=_rank,
            )
            ranked_for[pair] = ranked
        if ranked:
            candidates_of[job_id] = ranked
    waiting = sorted(candidates_of)  # oldest first
    for room in (covering, spare):
        left = []
        for job_id in waiting:
            chosen = next((c for c in candidates_of[job_id] if room[c.key] > 0), None)
            if chosen is None:
                left.append(job_id)
                continue
            room[chosen.key] -= 1
            assigned[chosen.key].append(unique[job_id])
            if room is spare:
                on_the_way.add(job_id)
            elif settled[chosen.key] > 0:
                settled[chosen.key] -= 1
            else:
                on_the_way.add(job_id)
        waiting = left
    for job_id in waiting:  # nobody has room: the first choice counts it (AtCapacity)
        assigned[candidates_of[job_id][0].key].append(unique[job_id])
    for share in assigned.values():
        share.sort(key=lambda job: job.id)
    return Assignment(assigned, frozenset(on_the_way), candidates_of)


def headroom(jobs: Iterable[ActionJob], claimants: Sequence[Claimant]) -> dict[str, int]:
    """How many runners each group may add so that each one has a job to take whichever
    runners take which jobs first: the queued jobs it can run, less every not-busy runner (of
    any group) that could take one of them.

    The assignment says which group counts a job; Gitea hands a job to whichever runner that
    can take it asks first, not to the one the assignment had in mind. An org group's idle
    runner may take a repo group's job, and a runner the repo group then creates for the job
    it counted finds none. Taking jobs never lowers this bound (a runner that takes a job of
    the group's scope removes one job and one runner; one that takes another job removes
    only a runner), so a group that stays within it never creates for a covered job."""
    index = _index(claimants)
    by_pair: dict[tuple[frozenset[str], Repository | None], int] = {}
    for job in {job.id: job for job in jobs if job.status == "queued"}.values():
        pair = (frozenset(job.labels), job_repository(job))
        by_pair[pair] = by_pair.get(pair, 0) + 1
    takers: dict[tuple[frozenset[str], Repository | None], list[Claimant]] = {
        pair: [c for c in index.covering(pair[1]) if labels_fit(pair[0], c.offered)]
        for pair in by_pair
    }
    mine: dict[str, list[tuple[frozenset[str], Repository | None]]] = {}
    for pair, cs in takers.items():
        for c in cs:
            mine.setdefault(c.key, []).append(pair)
    room: dict[str, int] = {}
    for me in claimants:
        pairs = mine.get(me.key, [])
        able = {c.key: max(0, c.not_busy) for pair in pairs for c in takers[pair]}
        room[me.key] = max(0, sum(by_pair[p] for p in pairs) - sum(able.values()))
    return room


def current_jobs(answers: Sequence[Answer], claimants: Sequence[Claimant]) -> list[ActionJob]:
    """The queued jobs of several groups' answers that are still queued as far as anyone can
    tell. A job leaves demand only on an answer that could have listed it: one newer than
    every answer listing it, from a group whose scope covers its repository and whose token
    can read that repository. So an org-scope answer from 10 s ago does not resurrect a job
    that a repo-scope answer from 1 s ago shows gone, and a peer whose token cannot read a
    repository (however fresh it keeps its answers) hides none of that repository's jobs."""
    scope_of = {c.key: c for c in claimants}
    listed_at = listed_times(answers)
    by_id: dict[int, ActionJob] = {}
    for answer in answers:
        for job in answer.jobs:
            by_id.setdefault(job.id, job)
    index = _index(claimants)
    answer_of = {a.key: a for a in answers}
    authority: dict[Repository | None, float] = {}
    kept = []
    for job_id in sorted(by_id):
        job = by_id[job_id]
        repository = job_repository(job)
        if repository is None:
            kept.append(job)  # nobody else can prove it gone; its own lister re-polls
            continue
        newest = authority.get(repository)
        if newest is None:
            newest = max(
                (
                    a.started_at
                    for c in index.covering(repository)
                    if (a := answer_of.get(c.key)) is not None
                    and scope_of[c.key].covers(repository)
                    and a.can_see(repository)
                ),
                default=float("-inf"),
            )
            authority[repository] = newest
        if listed_at[job_id] >= newest:
            kept.append(job)
    return kept


def listed_times(answers: Sequence[Answer]) -> dict[int, float]:
    """When each queued job was last listed: the newest ``started_at`` of the answers that
    list it."""
    listed_at: dict[int, float] = {}
    for answer in answers:
        for job in answer.jobs:
            if answer.started_at > listed_at.get(job.id, float("-inf")):
                listed_at[job.id] = answer.started_at
    return listed_at


def oldest_listing(
    jobs: Iterable[ActionJob], listed_at: dict[int, float], claimants: Sequence[Claimant]
) -> dict[str, float]:
    """For each group, when the job it could run that was listed longest ago was last listed
    (absent: it could run none of ``jobs``). A runner of the group first seen busy after that
    may have taken such a job, which the answer listing it still shows as queued; one seen
    busy before every listing of a job is busy with another (a runner runs one job), so it
    covers none. Candidates are found once per (labels, repository) pair, as in
    :func:`assign`."""
    by_pair: dict[tuple[frozenset[str], Repository | None], float] = {}
    for job in jobs:
        at = listed_at.get(job.id)
        if at is None:
            continue
        pair = (frozenset(job.labels), job_repository(job))
        by_pair[pair] = min(by_pair.get(pair, at), at)
    index = _index(claimants)
    oldest: dict[str, float] = {}
    for (labels, repository), at in by_pair.items():
        for c in index.covering(repository):
            if labels_fit(labels, c.offered) and at < oldest.get(c.key, float("inf")):
                oldest[c.key] = at
    return oldest
