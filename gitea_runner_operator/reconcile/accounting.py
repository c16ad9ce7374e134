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
which then shows ``AtCapacity``. Pure: the
same inputs give the same assignment everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.runnergroup import Scope

_REPO_IN_URL = re.compile(r"/api/v1/repos/([^/]+)/([^/]+)/actions/")
_SPECIFICITY = {Scope.REPO: 2, Scope.ORG: 1, Scope.GLOBAL: 0}


@dataclass(frozen=True, slots=True)
class Claimant:
    """One group, as the assignment sees it."""

    key: str  # namespace/name
    scope: Scope
    org: str | None
    repo: str | None
    offered: frozenset[str]
    not_busy: int  # starting and idle runners: each will take one job
    spare: int  # maxActiveRunners - alive runners

    def covers(self, repository: tuple[str, str] | None) -> bool:
        """Whether this group's runners can take jobs of that repository. A job whose
        repository is unknown is taken to be in scope (only the group that listed it sees
        it, and its scope is where it came from)."""
        if self.scope is Scope.GLOBAL or repository is None:
            return True
        owner, name = repository
        if (self.org or "").lower() != owner.lower():
            return False
        return self.scope is Scope.ORG or (self.repo or "").lower() == name.lower()

    def can_run(self, job: ActionJob) -> bool:
        return set(job.labels) <= self.offered


def job_repository(job: ActionJob) -> tuple[str, str] | None:
    """``(owner, repo)`` from the job's API URL; Gitea's job payload has no repo field."""
    match = _REPO_IN_URL.search(job.url or "")
    return (match.group(1), match.group(2)) if match else None


def overlaps(a: Claimant, b: Claimant) -> bool:
    """Whether some job could be counted by both groups."""
    if not a.offered & b.offered:
        return False
    for x, y in ((a, b), (b, a)):
        if x.scope is Scope.GLOBAL:
            return True
        if x.scope is Scope.ORG and (x.org or "").lower() == (y.org or "").lower():
            return True
    return (
        a.scope is Scope.REPO
        and b.scope is Scope.REPO
        and (a.org or "").lower() == (b.org or "").lower()
        and (a.repo or "").lower() == (b.repo or "").lower()
    )


def component(start: str, claimants: Mapping[str, Claimant]) -> list[Claimant]:
    """The groups whose counts can affect ``start``'s: everything reachable by overlap."""
    seen = {start}
    frontier = [start]
    while frontier:
        current = claimants[frontier.pop()]
        for key, other in claimants.items():
            if key not in seen and overlaps(current, other):
                seen.add(key)
                frontier.append(key)
    return [claimants[k] for k in sorted(seen)]


def assign(jobs: Iterable[ActionJob], claimants: Sequence[Claimant]) -> dict[str, list[ActionJob]]:
    """Which queued jobs each group counts as its demand. Every job that at least one group
    can run is counted exactly once; jobs no group can run are counted by none.

    Runners that exist cover jobs first, in whichever group they are (a starting or idle
    runner will take one); only then does spare capacity count, so a group that started
    runners for jobs before another group appeared is not joined by a second set."""
    ranked = sorted(claimants, key=lambda c: (-_SPECIFICITY[c.scope], -max(0, c.spare), c.key))
    covering = {c.key: max(0, c.not_busy) for c in claimants}
    spare = {c.key: max(0, c.spare) for c in claimants}
    assigned: dict[str, list[ActionJob]] = {c.key: [] for c in claimants}
    unique = {job.id: job for job in jobs if job.status == "queued"}
    candidates_of = {
        job_id: [
            c
            for c in ranked
            if c.covers(job_repository(unique[job_id])) and c.can_run(unique[job_id])
        ]
        for job_id in unique
    }
    waiting = [job_id for job_id in sorted(unique) if candidates_of[job_id]]  # oldest first
    for room in (covering, spare):
        left = []
        for job_id in waiting:
            chosen = next((c for c in candidates_of[job_id] if room[c.key] > 0), None)
            if chosen is None:
                left.append(job_id)
                continue
            room[chosen.key] -= 1
            assigned[chosen.key].append(unique[job_id])
        waiting = left
    for job_id in waiting:  # nobody has room: the first choice counts it (AtCapacity)
        assigned[candidates_of[job_id][0].key].append(unique[job_id])
    for share in assigned.values():
        share.sort(key=lambda j: j.id)
    return assigned


def freshest_view(
    observed: Sequence[tuple[Claimant, float, Sequence[ActionJob]]],
) -> list[ActionJob]:
    """The queued jobs of several groups' observations, each trusted only as far as the
    freshest observation that covers its repository still lists it: an org-scope answer from
    10 s ago must not resurrect a job that a repo-scope answer from 1 s ago shows gone."""
    by_id: dict[int, ActionJob] = {}
    for _, _, jobs in observed:
        for job in jobs:
            by_id.setdefault(job.id, job)
    kept = []
    for job_id, job in sorted(by_id.items()):
        repository = job_repository(job)
        covering = [(started, jobs) for c, started, jobs in observed if c.covers(repository)]
        if not covering:
            continue
        _, freshest = max(covering, key=lambda item: item[0])
        if any(j.id == job_id for j in freshest):
            kept.append(job)
    return kept
