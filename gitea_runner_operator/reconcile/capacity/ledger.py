"""When to run the accounting, and for whom: one assignment per family of groups that could
compete for the same jobs, recomputed only when a member's answer or capacity changed.

Who is in a family (groups on one Gitea whose scopes nest and whose labels intersect) is
reconcile/capacity/families.py's rule. A group alone in its family counts its own answer
(no share). Each group's reconcile reports what it knows of itself (its answer, its starting
and idle runners, its spare capacity) and reads its share back; the assignment of a family
is computed at most once per change of its inputs, so a reconcile costs its own group's
jobs and runners, and a family's assignment its jobs and groups once, instead of every
group times every job on every pass.

A peer whose share grew (it must create) is told so through ``notify``; shares that shrink
need no pass: a group never creates for a share it no longer has.

While a family fills (every member creating runners, so every reconcile changes an input),
its assignment is recomputed at most once per ``min_interval``; in between, members read
the last one. A stale share may still hold jobs that runners took since, so a member served
one creates nothing and is told (:meth:`Ledger.stale`) to look again. Stale means changed
by a peer whose scope overlaps the member's (reconcile/capacity/family_changes.py): a repo group
keeps creating from its share while other repositories' groups report. Each member also reads
its headroom (:meth:`Ledger.room`, accounting.headroom): Gitea hands a job to whichever
runner asks first, not to the one the assignment had in mind, so a group never adds more
runners than can surely find a job (tests/unit/reconcile/test_family_property.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from gitea_runner_operator.api.credentials import normalise_url
from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.reconcile.capacity.accounting import (
    Answer,
    Claimant,
    assignment,
    current_jobs,
    headroom,
    job_repository,
    listed_times,
    oldest_listing,
    seen_key,
)
from gitea_runner_operator.reconcile.capacity.families import families
from gitea_runner_operator.reconcile.capacity.family_changes import (
    Changes,
    lists_unknown_repository,
)
from gitea_runner_operator.reconcile.capacity.members import Member, Members
from gitea_runner_operator.reconcile.capacity.races import race_room

# An org-scope token's known-readable repositories, learned from the group's own Gitea
# answers (which its tenant controls), so bounded: per group by the org's repositories and
# at most this many; all groups together by MAX_SEEN_TOTAL, shared out evenly (never below
# MIN_SEEN_PER_GROUP); names longer than Gitea allows (owner 40, repository 100 characters)
# are not learned. Not learning is safe: a repository not known to be seen only makes the
# group's silence about its jobs count for nothing.
MAX_SEEN_REPOSITORIES = 20_000
MAX_SEEN_TOTAL = 200_000
# What MAX_SEEN_TOTAL learned repositories may cost at most (a hash each, in one frozenset
# per group that its latest answer shares): measured 16.8 MiB (test_accounting.py); kept as
# tuples of names, with a copy per answer, they took 86 MiB.
SEEN_BYTES_BOUND = 24 * 2**20
MIN_SEEN_PER_GROUP = 200
MAX_OWNER_LENGTH = 40
MAX_NAME_LENGTH = 100
MIN_INTERVAL = 0.5


def _as_of(claimant: Claimant, oldest: float | None) -> Claimant:
    """The claimant with its runners counted as of its peers' answers: a runner first seen
    busy (or finished) after the oldest listing of a queued job it could run
    (accounting.oldest_listing) may have taken that job, which that answer still lists, so
    it still covers one (like a finished runner in churn.py) until the job is listed again.
    Not against the family's oldest answer: after a hand-over every runner is "first seen"
    busy on the new owner's first answers, and a family created nothing until each member
    had polled again (issue 46)."""
    if not claimant.busy_since or oldest is None:
        return claimant
    extra = sum(1 for t in claimant.busy_since if t > oldest)
    return replace(claimant, not_busy=claimant.not_busy + extra) if extra else claimant


class Ledger:
    """The assignments of every family, kept between reconciles. A family is named by its
    smallest member key (the union-find root), which stays put as members come and go."""

    def __init__(
        self,
        notify: Callable[[str], None] | None = None,
        *,
        min_interval: float = MIN_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        members: Members | None = None,
    ) -> None:
        self._notify = notify
        self._min_interval = min_interval
        self._clock = clock
        # The book of every member, shared with the unmatched-jobs evaluation.
        self.members = members if members is not None else Members()
        self._members = self.members
        self._seen: dict[str, frozenset[int]] = {}  # seen_key of each learned repository
        self._family_of: dict[str, frozenset[str]] | None = None
        self._shares: dict[str, list[ActionJob]] = {}  # each member's last computed share
        self._room: dict[str, int] = {}  # each member's last computed headroom
        self._grown: set[str] = set()  # members whose headroom the last computation raised
        # Members a peer's runner on its way holds back -> their headroom without that hold.
        self._race_held: dict[str, int] = {}
        self._computed_at: dict[str, float] = {}  # family name -> when
        self._dirty: set[str] = set()  # families whose inputs changed since
        self._changes: dict[str, Changes] = {}  # ... and which members' shares that moved
        self._all_dirty = False  # membership changed: every family is recomputed
        self._answered: set[str] = set()  # families every member just answered: due now
        self.computations = 0  # for tests and benchmarks
        self._holders: dict[str, tuple[int, dict[int, str]]] = {}  # family -> (stamp, holders)
        self._queued: set[str] = set()  # members whose last answer lists a queued job
        # Per member: whether its answer (by ``started_at``) lists a job of unknown repository,
        # so a pass whose claimant moved (a runner started) does not walk the answer again.
        self._unknown: dict[str, tuple[float, bool]] = {}
        # Per normalised Gitea URL, every label its members offer (None: to be worked out).
        self._offered: dict[str, frozenset[str]] | None = None

    def offered(self, url: str) -> frozenset[str] | None:
        """Every label the groups of Gitea ``url`` offer, None when none is known yet: a
        queued job with a label outside it can be run by none of them (forge/unserved.py)."""
        if self._offered is None:
            by_url: dict[str, set[str]] = {}
            for member in self._members.values():
                by_url.setdefault(member.url, set()).update(member.claimant.offered)
            self._offered = {u: frozenset(labels) for u, labels in by_url.items()}
        return self._offered.get(normalise_url(url))

    def __len__(self) -> int:
        return len(self._members)

    def report(
        self,
        url: str,
        claimant: Claimant,
        answer: Answer | None,
        witnessed: Iterable[ActionJob] = (),
        *,
        failing: bool = False,
    ) -> None:
        """What a group's reconcile knows of it now. ``witnessed`` are jobs its token listed
        in other states (running, finished): they show repositories the token can read.
        ``failing``: its latest poll failed (:attr:`Member.couples`)."""
        key = claimant.key
        old = self._members.get(key)
        if answer is not None and claimant.scope is Scope.ORG:
            if old is None or old.answer is None or old.answer.started_at != answer.started_at:
                self._learn(key, (*answer.jobs, *witnessed))
            answer = replace(answer, sees=self._seen.get(key, frozenset()))
        new = Member(url, claimant, answer, failing=failing and answer is None)
        if old is not None and old.shape == new.shape and old.stamp == new.stamp:
            return
        self._members.put(new)
        if old is None or old.url != url or old.claimant.offered != claimant.offered:
            self._offered = None
        if answer is not None and answer.jobs:
            self._queued.add(key)
        else:
            self._queued.discard(key)
        if old is None or old.shape != new.shape:
            self._family_of, self._all_dirty = None, True
        elif self._family_of is not None:
            name = min(self._family_of[key])
            self._dirty.add(name)
            unknown = any(
                a is not None and self._lists_unknown(a)
                for a in (old.answer if old is not None else None, answer)
            )
            self._changes.setdefault(name, Changes()).add(url, claimant, reaches_all=unknown)
            if answer is not None and (old is None or old.answer is None):
                self._first_answer(name)

    def _first_answer(self, name: str) -> None:
        """Once every member has answered, the family is computed at once, not
        ``min_interval`` later (one taken over is weighed whole as soon as it can be)."""
        assert self._family_of is not None
        family = self._family_of[name]
        if all((m := self._members.get(k)) is not None and m.answer for k in family):
            self._answered.add(name)

    def _lists_unknown(self, answer: Answer) -> bool:
        """:func:`lists_unknown_repository`, worked out once per answer of a member."""
        known = self._unknown.get(answer.key)
        if known is not None and known[0] == answer.started_at:
            return known[1]
        verdict = lists_unknown_repository(answer.jobs)
        self._unknown[answer.key] = (answer.started_at, verdict)
        return verdict

    def remove(self, key: str) -> Member | None:
        """Forget a group; returns what it last reported (None: nothing)."""
        old = self._members.pop(key)
        if old is None:
            return None
        self._seen.pop(key, None)
        self._offered = None
        self._unknown.pop(key, None)
        self._queued.discard(key)
        self._shares.pop(key, None)
        self._room.pop(key, None)
        self._race_held.pop(key, None)
        self._computed_at.pop(key, None)
        self._dirty.discard(key)
        self._changes.pop(key, None)
        self._answered.discard(key)
        self._family_of, self._all_dirty = None, True
        return old

    def has_peers(self, key: str) -> bool:
        """Whether ``key`` shares jobs with other groups (as of the last assignment read); an
        unknown group counts as having peers until its first report says otherwise."""
        if key not in self._members:
            return True
        family = (self._family_of or {}).get(key)
        return family is None or len(family) > 1

    def must_weigh(self, key: str, started_at: float, lists_queued: bool) -> bool:
        """Whether an answer of ``key`` asked at ``started_at``, the same as the last one
        handed to its reconcile, must still reach that reconcile.

        Peers weigh answers by when they were asked (accounting.current_jobs): a fresher
        copy of the same answer ends a peer's claim on a job it no longer lists. That can
        change a share only while some answer of the family lists a queued job; while none
        does (nor this one), every share is empty and every headroom 0 whatever the ages,
        so the answer is skipped and only its time is recorded here: the next assignment,
        once a member lists a job, weighs it as asked now (tests/unit/reconcile/
        test_quiet_family.py). A group alone in its family needs no answer it had."""
        member = self._members.get(key)
        if member is None:
            return True  # not reported yet: counts as having peers
        family = (self._family_of or {}).get(key)
        if family is not None and len(family) == 1:
            return False
        if lists_queued or member.answer is None or family is None:
            return True
        if any(other in family for other in self._queued):
            return True
        if started_at > member.answer.started_at:
            answer = replace(member.answer, started_at=started_at)
            self._members.put(replace(member, answer=answer))
        return False

    def stale(self, key: str) -> bool:
        """Whether the share last read for ``key`` predates a change of its family's inputs
        that may have moved it: a change of a peer whose scope overlaps its own
        (reconcile/capacity/family_changes.py). A pass again after ``min_interval`` reads a
        fresh one."""
        family = (self._family_of or {}).get(key)
        if family is None or len(family) == 1:
            return False
        name = min(family)
        if key not in self._shares:
            return True
        if name not in self._dirty:
            return False
        changes = self._changes.get(name)
        member = self._members[key]
        return changes is None or changes.touches(member.url, member.claimant)

    def share(self, key: str) -> list[ActionJob] | None:
        """The group's share of its family's queued jobs; None when it is alone in its
        family (or has not reported), and then counts its own answer."""
        if key not in self._members:
            return None
        if self._family_of is None:
            self._family_of = families(self._members)
            if self._all_dirty:
                self._dirty = {min(f) for f in self._family_of.values()}
                self._changes = {name: Changes(everything=True) for name in self._dirty}
                self._all_dirty = False
        family = self._family_of[key]
        if len(family) == 1:
            return None
        name = min(family)
        now = self._clock()
        recent = now - self._computed_at.get(name, float("-inf")) < self._min_interval
        if name not in self._dirty or (recent and name not in self._answered):
            return self._shares.get(key, [])  # a new member waits for the next computation
        result = self._compute(family)
        self._computed_at[name] = now
        self._answered.discard(name)
        self._dirty.discard(name)
        self._changes.pop(name, None)
        self._announce(key, result)
        return result[key]

    def holders(self, key: str) -> dict[int, str]:
        """Which member counts each job of ``key``'s family, by the last assignment (empty
        when it is alone): status names the peer that serves a team's job (waiting.py)."""
        family = (self._family_of or {}).get(key)
        if family is None or len(family) == 1:
            return {}
        name = min(family)
        cached = self._holders.get(name)
        if cached is not None and cached[0] == self.computations:
            return cached[1]  # no assignment since: every member of the family reads this one
        if len(self._holders) > len(self._members):
            self._holders.clear()  # families that merged or parted: bounded by the groups
        found = {job.id: m for m in sorted(family) for job in self._shares.get(m, ())}
        self._holders[name] = (self.computations, found)
        return found

    def room(self, key: str, *, races: bool = True) -> int | None:
        """How many runners the group may add at most (accounting.headroom), as of the share
        last read; None when it is alone in its family (or has not reported). ``races``:
        kept off the jobs narrower peers' runners are on their way to (races.py); a runner
        bound to its job (Forgejo's handles) takes no other, so it needs no such hold."""
        family = (self._family_of or {}).get(key)
        if family is None or len(family) == 1:
            return None
        if not races and key in self._race_held:
            return self._race_held[key]
        return self._room.get(key, 0)

    def held_by_race(self, key: str) -> bool:
        """Whether the group's headroom was cut, as of its last share, to keep its runners
        off the job a narrower peer's runner is on its way to (races.py)."""
        return key in self._race_held

    def _compute(self, family: frozenset[str]) -> dict[str, list[ActionJob]]:
        self.computations += 1
        for key in family:  # each hold is decided again below, or none is left
            self._race_held.pop(key, None)
        if not any(key in family for key in self._queued):
            # No answer lists a queued job: every share is empty and every headroom 0 (the
            # resync's reports of a quiet family of 1,001 groups, twice a second).
            self._room.update(dict.fromkeys(family, 0))
            return {key: [] for key in family}
        members = [self._members[k] for k in sorted(family)]
        claimants = [m.claimant for m in members]
        answers = [m.answer for m in members if m.answer is not None]
        jobs = current_jobs(answers, claimants)
        oldest = oldest_listing(jobs, listed_times(answers), claimants)
        claimants = [_as_of(c, oldest.get(c.key)) for c in claimants]
        result = assignment(jobs, claimants)
        room = headroom(jobs, claimants)
        for key, limit in race_room(result, claimants).items():
            if limit < room.get(key, 0):
                self._race_held[key] = room[key]
                room[key] = limit
        self._grown = {k for k, n in room.items() if n > self._room.get(k, 0)}
        self._room.update(room)
        return result.shares

    def _announce(self, caller: str, result: Mapping[str, list[ActionJob]]) -> None:
        """Tell each peer whose share or room grew: it has runners to add. A room grows when
        a runner it waited for took its job (races.py), with no job added to its share."""
        grown, self._grown = self._grown, set()
        for key, jobs in result.items():
            before = len(self._shares.get(key, ()))
            self._shares[key] = jobs
            more = len(jobs) > before or (key in grown and bool(jobs))
            if more and key != caller and self._notify is not None:
                self._notify(key)

    def seen_bound(self) -> int:
        """How many repositories one group may have learned, now."""
        share = MAX_SEEN_TOTAL // max(1, len(self._members))
        return max(MIN_SEEN_PER_GROUP, min(MAX_SEEN_REPOSITORIES, share))

    def _learn(self, key: str, jobs: Iterable[ActionJob]) -> None:
        """Kept as one frozenset per group, rebuilt when something is learned: sized to
        its content (a set grown by adds keeps up to 4 times the room), and the group's
        latest answer shares it rather than holding a copy."""
        kept = self._seen.get(key, frozenset())
        seen = set(kept)
        bound = self.seen_bound()
        while len(seen) > bound:  # more groups since: give back what is over the share
            seen.pop()
        for job in jobs:
            if len(seen) >= bound:
                break
            repository = job_repository(job)
            if (
                repository is not None
                and len(repository[0]) <= MAX_OWNER_LENGTH
                and len(repository[1]) <= MAX_NAME_LENGTH
            ):
                seen.add(seen_key(repository))
        self._seen[key] = kept if seen == kept else frozenset(seen)
