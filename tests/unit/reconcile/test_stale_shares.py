"""A share goes stale only through a peer whose scope overlaps its group's
(reconcile/capacity/family_changes.py): in a family of one org group and many repo groups that fill
at once, a repo group keeps creating from its share while other repositories' groups report,
and its headroom (which bounds what it creates) is what a fresh assignment would give."""

from __future__ import annotations

import random

from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.reconcile.capacity.accounting import Answer, Claimant
from gitea_runner_operator.reconcile.capacity.ledger import Ledger
from tests.support.claims import group, job

URL = "https://g.test"
ORG = "team-a/org"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# Jobs the org token was seen to list in every repository: it reads them all from the start.
WITNESSED = [job(0, f"acme/{name}") for name in "abc"]


def _report(ledger: Ledger, c: Claimant, jobs: list[ActionJob], started: float) -> None:
    ledger.report(URL, c, Answer(c.key, started, jobs), WITNESSED if c.scope is Scope.ORG else ())


def _family(ledger: Ledger) -> dict[str, Claimant]:
    members = {
        ORG: group(ORG, Scope.ORG, "acme", spare=10),
        "r/a1": group("r/a1", Scope.REPO, "acme", "a", spare=10),
        "r/a2": group("r/a2", Scope.REPO, "acme", "a", spare=10),
        "r/b": group("r/b", Scope.REPO, "acme", "b", spare=10),
        "r/c": group("r/c", Scope.REPO, "acme", "c", spare=10),
    }
    for c in members.values():
        _report(ledger, c, [], 1.0)
    ledger.share(ORG)
    return members


def test_a_peer_of_another_repository_leaves_a_share_current_an_overlapping_one_does_not():
    clock = Clock()
    ledger = Ledger(min_interval=0.5, clock=clock)
    members = _family(ledger)
    for key in members:
        assert not ledger.stale(key)
    _report(ledger, members["r/b"], [job(1, "acme/b")], 2.0)  # b's group sees its job
    assert ledger.stale("r/b")
    assert not ledger.stale("r/a1") and not ledger.stale("r/c")  # other repositories
    assert ledger.stale(ORG)  # the org group could take b's job
    _report(ledger, members["r/a1"], [job(2, "acme/a")], 2.0)
    assert ledger.stale("r/a2")  # same repository: its share may move
    _report(ledger, members[ORG], [job(1, "acme/b")], 3.0)  # it covers every repository
    assert ledger.stale("r/c")
    clock.now += 1
    ledger.share("r/c")  # recomputed: every share is current again
    assert not any(ledger.stale(key) for key in members)
    assert ledger.share("r/b") == [job(1, "acme/b")]


def test_a_job_of_unknown_repository_makes_every_share_stale():
    ledger = Ledger(min_interval=0.5, clock=Clock())
    members = _family(ledger)
    unknown = ActionJob(id=9, labels=("linux",), status="queued", url="")
    _report(ledger, members["r/b"], [unknown], 2.0)  # every member is its candidate
    assert ledger.stale("r/a1") and ledger.stale("r/c")


def test_a_new_member_makes_every_share_stale():
    ledger = Ledger(min_interval=0.5, clock=Clock())
    _family(ledger)
    _report(ledger, group("r/d", Scope.REPO, "acme", "d"), [], 2.0)
    ledger.share("r/d")  # too soon to recompute: every member waits
    assert ledger.stale("r/a1") and ledger.stale(ORG)


REPOS = {"r/a1": "acme/a", "r/a2": "acme/a", "r/b": "acme/b", "r/c": "acme/c"}


def test_a_share_read_as_current_has_the_headroom_a_fresh_assignment_gives():
    """Random reports (answers appearing and dropping jobs, runners created); after each, every
    member whose share is not stale has the headroom a fresh assignment of the same reports
    gives, and, while no org runner is idle to cover jobs across repositories, the same share.
    (No busy runners here: their weighing by the family's oldest answer only lowers a stale
    headroom, family_changes.py.)"""
    rng = random.Random(27)  # noqa: S311 - a reproducible sequence of reports
    for _ in range(40):
        clock = Clock()
        ledger = Ledger(min_interval=0.5, clock=clock)
        members = _family(ledger)
        last: dict[str, tuple[Claimant, list[ActionJob], float]] = {
            k: (c, [], 1.0) for k, c in members.items()
        }
        next_id = 1
        for step in range(60):
            key = rng.choice(sorted(members))
            c = members[key]
            if key == ORG:
                jobs = [j for _, listed, _ in last.values() for j in listed]
                jobs = sorted({j.id: j for j in jobs if rng.random() < 0.8}.values(), key=_id)
            else:
                jobs = [j for j in last[key][1] if rng.random() < 0.7]
                for _ in range(rng.randint(0, 2)):
                    jobs.append(job(next_id, REPOS[key]))
                    next_id += 1
            not_busy = rng.randint(0, 1) if key == ORG else rng.randint(0, 2)
            c = Claimant(c.key, c.scope, c.org, c.repo, c.offered, not_busy, 10 - not_busy)
            started = 2.0 + step
            _report(ledger, c, jobs, started)
            last[key] = (c, jobs, started)
            clock.now += rng.choice((0.1, 0.2, 0.6))
            ledger.share(rng.choice(sorted(members)))
            fresh = Ledger(min_interval=0)
            for claimant, listed, at in last.values():
                _report(fresh, claimant, listed, at)
            org_idle = last[ORG][0].not_busy > 0
            for k in members:
                if ledger.stale(k):
                    continue
                fresh_share = fresh.share(k)
                assert ledger.room(k) == fresh.room(k), (step, k)
                if not org_idle:
                    assert ledger.share(k) == fresh_share, (step, k)


def _id(j: ActionJob) -> int:
    return j.id
