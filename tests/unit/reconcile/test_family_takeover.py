"""A family taken over from a replica that died (issue 46): its jobs get their runner Jobs on
the new owner's first answers, not one or two polls later. With the real Reconciler and
Ledger over one in-memory cluster; the old and the new replica each have their own.

The dead replica left the org group a runner that is busy. On the new owner every runner is
"first seen" busy on its first answers, and a runner first seen busy after a peer's answer
may have taken a job that answer lists (ledger._as_of): counted against the oldest answer
of the family, the inherited busy runner covered the repo group's job although the org
group's own answer, asked after the repo group's, still listed that job as queued. Nobody
created until every member had polled again (the platform's run: the survivor's third poll,
38.5 s against a bound of 25 s)."""

from __future__ import annotations

import asyncio
import random

import pytest

from gitea_runner_operator.api.gitea import ActionJob, ActionRunner
from gitea_runner_operator.api.observation import Observation, Snapshot
from gitea_runner_operator.reconcile.capacity.ledger import Ledger
from tests.support.family import CREATED, LABEL, URL, Clock, World, group_spec, reconciler
from tests.support.family_sim import FAMILIES, Sim

ORG, APP, LIB = "team-a/org", "team-b/app", "team-c/lib"


def job(i: int, repo: str) -> ActionJob:
    return ActionJob(
        id=i, labels=(LABEL,), status="queued", url=f"{URL}/api/v1/repos/{repo}/actions/jobs/{i}"
    )


def answer(
    jobs: tuple[ActionJob, ...], runners: tuple[ActionRunner, ...], started_at: float
) -> Snapshot:
    obs = Observation(queued=jobs, runners=runners)
    return Snapshot(started_at=started_at, checked_at=CREATED, observation=obs)


def world() -> World:
    w = World()
    w.add("team-a", "org", group_spec("org", "acme"))
    w.add("team-b", "app", group_spec("repo", "acme", "app"))
    w.add("team-c", "lib", group_spec("repo", "acme", "lib"))
    return w


async def busy_org_runner(w: World, clock: Clock) -> ActionRunner:
    """The replica that dies: its org group made a runner for a job, which took it."""
    old, sources, _ = reconciler(w, ledger=Ledger(min_interval=0.0, clock=clock), clock=clock)
    for key in (ORG, APP, LIB):
        await old.reconcile(key)
    sources.get(ORG).latest = answer((job(1, "acme/tools"),), (), clock.now)
    await old.reconcile(ORG)
    (name,) = w.groups[ORG].jobs
    pod = f"{name}-bcdfg"
    w.groups[ORG].pods.append(
        {
            "metadata": {
                "name": pod,
                "labels": {"batch.kubernetes.io/job-name": name},
                "creationTimestamp": CREATED,
            },
            "status": {"phase": "Running"},
        }
    )
    return ActionRunner(id=1, name=pod, busy=True, ephemeral=True, status="active")


async def test_a_taken_family_creates_on_its_members_first_answers():
    w, clock = world(), Clock(1000.0)
    busy = await busy_org_runner(w, clock)
    # SIGKILL: another replica takes the family, with its own ledger; a job of each
    # repository is queued meanwhile.
    clock.now += 20
    new, sources, _ = reconciler(w, ledger=Ledger(min_interval=0.5, clock=clock), clock=clock)
    for key in (ORG, APP, LIB):
        await new.reconcile(key)  # the first passes: no answer yet
    app, lib = job(2, "acme/app"), job(3, "acme/lib")
    # The first answers, a few hundred milliseconds apart, in any order.
    sources.get(APP).latest = answer((app,), (), clock.now)
    await new.reconcile(APP)
    clock.now += 0.3
    sources.get(ORG).latest = answer((app, lib), (busy,), clock.now)  # it lists both still
    await new.reconcile(ORG)
    clock.now += 0.3
    sources.get(LIB).latest = answer((lib,), (), clock.now)
    await new.reconcile(LIB)
    clock.now += 0.5  # a stale share's pass comes back after min_interval
    for key in (APP, LIB, ORG):
        await new.reconcile(key)
    assert (w.created(APP), w.created(LIB)) == (1, 1)  # a runner for each job
    assert w.created(ORG) == 1  # only the busy one it had


async def test_a_busy_runner_still_covers_a_job_no_later_answer_lists():
    """What the rule is for, kept: the org runner was first seen busy after the only answer
    that lists the repo group's job (the org token cannot read that repository), so it
    may have taken it, and the repo group creates nothing until it has asked again."""
    w, clock = world(), Clock(1000.0)
    busy = await busy_org_runner(w, clock)
    clock.now += 20
    new, sources, _ = reconciler(w, ledger=Ledger(min_interval=0.0, clock=clock), clock=clock)
    for key in (ORG, APP, LIB):
        await new.reconcile(key)
    app = job(2, "acme/app")
    sources.get(APP).latest = answer((app,), (), clock.now)
    clock.now += 0.3
    sources.get(ORG).latest = answer((), (busy,), clock.now)  # cannot list acme/app
    await new.reconcile(ORG)
    await new.reconcile(APP)
    assert w.created(APP) == 0
    clock.now += 10  # its next poll: the job is still queued, so the runner took another
    sources.get(APP).latest = answer((app,), (), clock.now)
    await new.reconcile(APP)
    assert w.created(APP) == 1


async def test_a_taken_family_weighs_its_first_answer_with_every_member():
    """A taken group is polled at once (runtime/taken_polls.py), so the org group's answer
    may come before the repo groups' first passes: introduced first, they are in the book,
    and the org group does not count their jobs alone (each team's job is its own first)."""
    w, clock = world(), Clock(1000.0)
    new, sources, _ = reconciler(w, ledger=Ledger(min_interval=0.5, clock=clock), clock=clock)
    for key in (ORG, APP, LIB):
        new.introduce(key, new._admissions.admit(key, *_meta_spec(w, key)).spec)
    app, lib = job(2, "acme/app"), job(3, "acme/lib")
    sources.get(ORG).latest = answer((app, lib), (), clock.now)
    await new.reconcile(ORG)  # its first pass, with its answer already
    assert w.created(ORG) == 0
    sources.get(APP).latest = answer((app,), (), clock.now + 0.1)
    sources.get(LIB).latest = answer((lib,), (), clock.now + 0.1)
    clock.now += 0.5
    for key in (APP, LIB):
        await new.reconcile(key)
    assert (w.created(APP), w.created(LIB), w.created(ORG)) == (1, 1, 0)


def _meta_spec(w: World, key: str) -> tuple[dict, dict]:
    obj = w.group(key)
    assert obj is not None
    return obj["metadata"], obj["spec"]


def test_a_family_is_weighed_at_once_when_its_last_member_first_answers():
    """The share is computed as soon as every member has answered once, not held back by
    ``min_interval``: the last member's first answer after a take is weighed by its own
    pass (before, that pass read a stale share, created nothing and came back 0.5 s
    later: the breakdown's 0.5 s between a family's first polls and its creates)."""
    from gitea_runner_operator.api.runnergroup import Scope
    from tests.support.claims import group, report
    from tests.support.claims import job as queued

    clock = Clock(1000.0)
    ledger = Ledger(min_interval=0.5, clock=clock)
    org = group(ORG, Scope.ORG, "acme")
    app = group(APP, Scope.REPO, "acme", "app")
    lib = group(LIB, Scope.REPO, "acme", "lib")
    for c in (org, app, lib):
        report(ledger, c, None)  # introduced: no answer yet
    jobs = [queued(2, "acme/app"), queued(3, "acme/lib")]
    report(ledger, org, jobs, started=clock.now)
    ledger.share(ORG)
    clock.now += 0.1
    report(ledger, app, jobs[:1], started=clock.now)
    ledger.share(APP)
    assert ledger.stale(APP)  # within min_interval, and the family not complete yet
    clock.now += 0.1
    report(ledger, lib, jobs[1:], started=clock.now)  # the last one's first answer
    assert ledger.share(LIB) == jobs[1:]
    assert not ledger.stale(LIB)  # current: its pass creates now


class _TakenSim(Sim):
    """The property test's schedules with a hand-over half-way: a new Reconciler and Ledger
    (another replica's) over the same cluster and Gitea, its members introduced before any
    answer as runtime/taken_polls.py does, every runner then "first seen" by it."""

    async def take_over(self) -> None:
        self.ledger = Ledger(min_interval=0.5, clock=self.clock)
        self.rec, self.sources, _ = reconciler(self.world, ledger=self.ledger, clock=self.clock)
        for key in sorted(self.members):
            spec = self.rec._admissions.admit(key, *_meta_spec(self.world, key)).spec
            assert spec is not None
            self.rec.introduce(key, spec)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_family_taken_over_never_creates_a_runner_for_a_covered_job(family):
    async def run(sim: _TakenSim) -> None:
        await sim.run(60)
        await sim.take_over()
        await sim.run(80)

    for seed in range(60):
        sim = _TakenSim(FAMILIES[family], random.Random(seed))  # noqa: S311 - fixed schedule
        try:
            asyncio.run(run(sim))
        except AssertionError as exc:
            raise AssertionError(f"{family}, seed {seed}: {exc}") from None
