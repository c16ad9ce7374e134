"""Gitea's oldest-job-first race in a family of an org group and a repo group (issue 46):
the org group adds no runner that could take the older job a repo runner on its way was made
for, and creates as soon as that runner took it; a peer whose runner never asks holds it
back for scaling.RACE_HOLD at most. (The property test, test_family_property.py, checks over
random schedules that no take strands a runner.)"""

from __future__ import annotations

import dataclasses

from gitea_runner_operator.api.runnergroup import Scope, parse_spec
from gitea_runner_operator.objects.views import RunnerJobView
from gitea_runner_operator.reconcile.capacity.ledger import Ledger
from gitea_runner_operator.reconcile.inputs import GroupPass
from gitea_runner_operator.reconcile.scaling import RACE_HOLD, RACE_RECHECK, RunnerState
from gitea_runner_operator.reconcile.steps.claims import claimant
from tests.support.builders import queued_job, spec_with
from tests.support.claims import group, job, report
from tests.support.family import Clock, World, answer, group_spec, reconciler

ORG, REPO = "platform/org", "team-a/app"


def _family(repo_runner_young: bool, jobs: list) -> tuple[Ledger, list[str]]:
    told: list[str] = []
    ledger = Ledger(notify=told.append, min_interval=0)
    app = group(REPO, Scope.REPO, "acme", "app", not_busy=1)
    app = dataclasses.replace(app, young=1 if repo_runner_young else 0)
    report(ledger, app, [j for j in jobs if "acme/app" in (j.url or "")])
    report(ledger, group(ORG, Scope.ORG, "acme"), jobs)
    return ledger, told


def test_an_org_group_waits_for_a_repo_runner_on_its_way_to_an_older_job() -> None:
    # Job 1 (acme/app) is the repo group's, its runner starting; job 2 (acme/lib) only the
    # org group can run. An org runner made now may ask first and take job 1.
    ledger, told = _family(True, [job(1, "acme/app"), job(2, "acme/lib")])
    assert [j.id for j in ledger.share(ORG) or []] == [2]
    assert [j.id for j in ledger.share(REPO) or []] == [1]
    assert ledger.room(ORG) == 0
    assert ledger.room(REPO) == 0  # its runner covers its job

    # The repo runner took job 1 (its poll shows it busy and the job gone): the org group
    # is told at once, with no job added to its share, and may create for job 2.
    report(ledger, group(REPO, Scope.REPO, "acme", "app"), [], started=2.0)
    report(ledger, group(ORG, Scope.ORG, "acme"), [job(2, "acme/lib")], started=2.0)
    assert [j.id for j in ledger.share(REPO) or []] == []
    assert ledger.room(ORG) == 1
    assert ORG in told


def test_the_org_group_still_creates_for_its_jobs_older_than_the_one_on_the_way() -> None:
    jobs = [job(1, "acme/lib"), job(2, "acme/app"), job(3, "acme/lib"), job(4, "acme/lib")]
    ledger, _ = _family(True, jobs)
    assert [j.id for j in ledger.share(ORG) or []] == [1, 3, 4]
    assert ledger.room(ORG) == 1  # job 1 only: a second runner could take job 2


def test_a_repo_runner_on_its_way_longer_than_the_hold_holds_nobody_back() -> None:
    ledger, _ = _family(False, [job(1, "acme/app"), job(2, "acme/lib")])
    ledger.share(ORG)
    assert ledger.room(ORG) == 1


def test_peers_that_can_run_each_others_jobs_do_not_wait_for_each_other() -> None:
    # Two org groups of one org: whichever runner takes which job, none is left without.
    ledger = Ledger(min_interval=0)
    one = dataclasses.replace(group("a/one", Scope.ORG, "acme", not_busy=1), young=1)
    report(ledger, one, [job(1, "acme/app"), job(2, "acme/lib")])
    report(
        ledger, group("b/two", Scope.ORG, "acme", spare=9), [job(1, "acme/app"), job(2, "acme/lib")]
    )
    shares = {k: [j.id for j in ledger.share(k) or []] for k in ("a/one", "b/two")}
    assert sorted(shares["a/one"] + shares["b/two"]) == [1, 2]
    assert ledger.room("b/two") == len(shares["b/two"])


def _runner(name: str, age: float, now: float) -> RunnerJobView:
    return RunnerJobView(
        name=name,
        created_at=now - age,
        pod_names=(f"{name}-pod",),
        finished=False,
        deleting=False,
        took_job=False,
    )


def test_a_group_counts_as_young_only_its_runners_made_within_the_hold() -> None:
    now = 10_000.0
    views = [
        _runner("fresh", 5.0, now),
        _runner("old", RACE_HOLD + 1, now),
        _runner("busy", 1, now),
    ]
    states = {"fresh": RunnerState.STARTING, "old": RunnerState.IDLE, "busy": RunnerState.BUSY}
    p = GroupPass(
        key=REPO,
        group={},
        views=views,
        jobs=[],
        all_pods={},
        pending=2,
        spec=parse_spec(spec_with(maxActiveRunners=10)),
        states=states,
    )
    c = claimant(p, blocked=False, now=now)
    assert (c.not_busy, c.young) == (4, 3)  # 2 pending + fresh; the old idle one is not


async def test_a_held_org_group_asks_gitea_again_soon_and_creates_once_the_job_is_taken() -> None:
    """With the real Reconciler: the org group held back looks again within
    scaling.RACE_RECHECK, asking its poll for an answer newer than the hold, not a whole
    poll interval later; the answer that shows the repo's job taken lets it create."""
    world = World()
    world.add("team-a", "app", group_spec("repo", "acme", "app"))
    world.add("platform", "org", group_spec("org", "acme"))
    repo, org = "team-a/app", "platform/org"
    clock = Clock(100.0)
    rec, sources, _ = reconciler(world, clock=clock)
    sources.get(repo).latest = answer((queued_job(1, "acme/app"),), started_at=100.0)
    sources.get(org).latest = answer(
        (queued_job(1, "acme/app"), queued_job(2, "acme/lib")), started_at=100.0
    )
    await rec.reconcile(repo)
    assert world.created(repo) == 1  # its runner is on its way to job 1

    result = await rec.reconcile(org)
    assert world.created(org) == 0
    assert result.requeue_after is not None and result.requeue_after <= RACE_RECHECK
    assert sources.get(org).woken == 0  # its answer is fresh: no second ask yet

    clock.now += RACE_RECHECK
    await rec.reconcile(org)
    assert world.created(org) == 0
    assert sources.get(org).woken == 1  # an answer newer than the hold is asked for

    # That answer shows job 1 taken by the repo's runner: the org group creates for job 2.
    sources.get(org).latest = answer((queued_job(2, "acme/lib"),), started_at=clock.now)
    await rec.reconcile(org)
    assert world.created(org) == 1


def test_runners_bound_to_their_job_are_not_held_back() -> None:
    """Forgejo 15's runners take the job they are bound to (``one-job --handle``), never an
    older one: the org group's room without the hold is what its plan reads there."""
    ledger, _ = _family(True, [job(1, "acme/app"), job(2, "acme/lib")])
    ledger.share(ORG)
    assert ledger.room(ORG) == 0
    assert ledger.room(ORG, races=False) == 1
    assert ledger.held_by_race(ORG)
