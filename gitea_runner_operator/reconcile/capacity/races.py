"""Gitea's oldest-job-first race between nested groups: how many runners a group may add
without taking the job a narrower peer's runner was made for. Pure.

Gitea hands a runner that asks for work the oldest queued job its scope and labels allow,
whichever group's accounting counted that job. In a family of an org group and a repo group,
the repo group makes a runner for an older job of its repository while the org group makes
one for a newer job of another repository. If the org runner asks first it takes the older
job; the repo runner finds nothing it may run and idles out, and the org group's own job
waits for another runner: one runner Job too many, and a job served a poll later (issue 46:
1 to 4 in about 115 runner Jobs after a SIGKILL hand-over).

So a group adds runners only for jobs older than the oldest job it could take from a peer
that could not take the group's jobs in return, while that peer's runner is on its way
(made within ``scaling.RACE_HOLD``, or about to be made). Its jobs newer than that wait
until the peer's runner has taken its job (a poll of either group shows it) or has been on
its way for longer than the hold: a peer whose runners never ask (broken, or a tenant's
runner image that registers and idles) holds a wider group back for that long at most, and
then it creates as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from gitea_runner_operator.reconcile.capacity.accounting import Assignment, Claimant


def race_room(assignment: Assignment, claimants: Sequence[Claimant]) -> dict[str, int]:
    """For each group that would take a peer's job on its way, how many runners it may add
    at most: its own jobs older than that one, less its runners that are not busy (each
    takes one of its oldest jobs first). Groups not listed have no such bound.

    Jobs of one (labels, repository) pair share one list of candidates (accounting.py), so
    who may run them is a set per pair, and whether a peer could run a group's share is
    asked once per pair of its share: with 300 org groups of one org, a walk per job and
    candidate took 1.1 s of the event loop."""
    holder = {job.id: key for key, jobs in assignment.shares.items() for job in jobs}
    runners: dict[int, frozenset[str]] = {}  # id of a candidates list -> who is in it
    reach: dict[str, list[int]] = {}
    for job_id in sorted(assignment.candidates):  # oldest first
        ranked = assignment.candidates[job_id]
        if id(ranked) not in runners:
            runners[id(ranked)] = frozenset(c.key for c in ranked)
        for c in ranked:
            reach.setdefault(c.key, []).append(job_id)
    room: dict[str, int] = {}
    for me in claimants:
        mine = assignment.shares.get(me.key, [])
        if not mine:
            continue
        pairs = {runners[id(assignment.candidates[job.id])] for job in mine}
        limit = _first_taken_from(me.key, reach.get(me.key, []), holder, assignment, pairs)
        if limit is None:
            continue
        older = sum(1 for job in mine if job.id < limit)
        room[me.key] = max(0, older - max(0, me.not_busy))
    return room


def _first_taken_from(
    key: str,
    reach: list[int],
    holder: dict[int, str],
    assignment: Assignment,
    pairs: set[frozenset[str]],
) -> int | None:
    """The oldest job ``key``'s runners could take from a peer: held by another group whose
    runner is on its way, where that group could not run some job of ``key``'s share
    (``pairs``: who may run each kind of job in it)."""
    narrower: dict[str, bool] = {}
    for job_id in reach:
        peer = holder.get(job_id)
        if peer is None or peer == key or job_id not in assignment.on_the_way:
            continue
        if peer not in narrower:
            narrower[peer] = any(peer not in able for able in pairs)
        if narrower[peer]:
            return job_id
    return None
