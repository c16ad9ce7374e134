"""A group that cannot create holds no share of its family's jobs: its peers serve them at
once, and it still reports the demand it sees. With the real Reconciler and Ledger.

Each case: a repo-scope group (the jobs' first choice) and an org-scope peer over the same
three queued jobs. The repo group cannot create; the org group must create all three."""

from __future__ import annotations

from typing import Any

from gitea_runner_operator.api.observation import Problem
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.reconcile.capacity.ledger import Ledger
from gitea_runner_operator.reconcile.status.parts import NOTHING, Part
from tests.support.builders import queued_job
from tests.support.family import T0, Clock, World, answer, group_spec, reconciler

JOBS = tuple(queued_job(i) for i in range(1, 4))


def family(**repo_extra: Any) -> World:
    world = World()
    world.add("team-b", "repo", group_spec("repo", "acme", "app", **repo_extra))
    world.add("team-a", "org", group_spec("org", "acme"))
    return world


REPO, ORG = "team-b/repo", "team-a/org"
HOST_PATH = {"spec": {"volumes": [{"name": "r", "hostPath": {"path": "/"}}]}}


class Caches:
    """spec.cache servers: ready for every group but ``not_ready``."""

    def __init__(self, *not_ready: str) -> None:
        self.not_ready = set(not_ready)

    async def ensure(self, group: dict[str, Any], spec: RunnerGroupSpec) -> bool:
        meta = group["metadata"]
        return f"{meta['namespace']}/{meta['name']}" not in self.not_ready

    def settling(self, key: str) -> bool:
        return False  # the servers of ready configs are up

    def part(self, group: dict[str, Any]) -> Part:
        return NOTHING  # ready servers: status.cache is not what these tests read


async def test_a_refused_spec_leaves_the_family():
    world = family()
    rec, sources, _ = reconciler(world)
    await rec.reconcile(REPO)  # healthy, no answer yet: a member with room
    world.groups[REPO].spec = {**world.groups[REPO].spec, "template": HOST_PATH}
    sources.get(REPO).latest = answer(JOBS)
    await rec.reconcile(REPO)
    ready = next(c for c in world.groups[REPO].status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "TemplateNotAllowed"
    sources.get(ORG).latest = answer(JOBS)
    await rec.reconcile(ORG)
    assert world.created(ORG) == 3
    assert world.created(REPO) == 0


async def test_an_invalid_spec_leaves_the_family():
    world = family()
    rec, sources, _ = reconciler(world)
    await rec.reconcile(REPO)
    world.groups[REPO].spec = {**world.groups[REPO].spec, "maxActiveRunners": -1}
    await rec.reconcile(REPO)
    sources.get(ORG).latest = answer(JOBS)
    await rec.reconcile(ORG)
    assert world.created(ORG) == 3


async def test_a_cache_not_ready_holds_no_share_but_reports_its_demand():
    world = family()
    rec, sources, _ = reconciler(world, cache_servers=Caches(REPO))
    sources.get(REPO).latest = answer(JOBS)
    sources.get(ORG).latest = answer(JOBS)
    await rec.reconcile(REPO)
    await rec.reconcile(ORG)
    assert world.created(REPO) == 0
    assert world.created(ORG) == 3
    await rec.reconcile(REPO)
    assert world.groups[REPO].status["queuedJobs"] == 3


async def test_a_group_backing_off_after_a_refused_create_holds_no_share():
    world = family()
    world.groups[REPO].refuse = "exceeded quota"
    woken: list[str] = []
    rec, sources, ledger = reconciler(world)
    ledger._notify = woken.append
    await rec.reconcile(REPO)  # no answer yet: a member with room, the jobs' first choice
    sources.get(ORG).latest = answer(JOBS)
    await rec.reconcile(ORG)
    assert world.created(ORG) == 0  # the repo group holds the jobs by its room
    sources.get(REPO).latest = answer(JOBS)
    await rec.reconcile(REPO)  # its create is refused: it backs off
    assert world.created(REPO) == 0
    assert ORG in woken  # the peer is told at once, not at its next poll
    await rec.reconcile(ORG)
    assert world.created(ORG) == 3
    assert world.groups[REPO].status["queuedJobs"] == 3


async def test_runners_that_do_not_start_within_the_bound_cover_no_jobs():
    world = family()
    wall = Clock(T0 + 30)
    rec, sources, _ = reconciler(world, wall=wall)
    sources.get(REPO).latest = answer(JOBS)
    await rec.reconcile(REPO)  # alone: creates three runners, which never start
    assert world.created(REPO) == 3
    sources.get(ORG).latest = answer(JOBS)
    await rec.reconcile(ORG)
    assert world.created(ORG) == 0  # the repo group's starting runners cover the jobs
    wall.now = T0 + 200  # past the start bound (120 s), far short of startupTimeout
    await rec.reconcile(REPO)
    await rec.reconcile(ORG)
    assert world.created(ORG) == 3
    assert world.created(REPO) == 3
    assert world.groups[REPO].status["queuedJobs"] == 3


async def test_a_gitea_problem_holds_no_share():
    world = family()
    rec, sources, _ = reconciler(world)
    sources.get(REPO).latest = answer(problem=Problem("GiteaError", "down"))
    await rec.reconcile(REPO)
    sources.get(ORG).latest = answer(JOBS)
    await rec.reconcile(ORG)
    assert world.created(ORG) == 3


async def test_a_quiet_family_does_not_bring_its_members_back_for_a_stale_share():
    """Every member's new answer makes its family's shares stale. A member with nothing to
    serve gains nothing from a fresher share, so it does not come back for one (1,001 quiet
    groups of one family did 567 reconciles a second); a member with jobs does."""
    clock = Clock()
    world = family()
    rec, sources, _ = reconciler(world, ledger=Ledger(min_interval=0.5, clock=clock), clock=clock)
    for started in (1.0, 2.0, 3.0):
        clock.now += 6  # a poll later: past the ledger's and the unmatched book's intervals
        sources.get(REPO).latest = answer(started_at=started)
        await rec.reconcile(REPO)
        sources.get(ORG).latest = answer(started_at=started)
        quiet = await rec.reconcile(ORG)  # the repo group's newer answer made its share stale
        if started > 1.0:  # once both have joined (a new member is an unmatched-jobs change)
            assert quiet.requeue_after is None
    sources.get(REPO).latest = answer(JOBS, started_at=3.0)
    await rec.reconcile(REPO)
    sources.get(ORG).latest = answer(JOBS, started_at=3.0)
    busy = await rec.reconcile(ORG)
    assert busy.requeue_after is not None and busy.requeue_after <= 0.5


async def test_a_global_group_whose_token_does_not_work_couples_no_family():
    """Two org groups of different orgs, and a global group whose polls fail (a dead
    token): each org group stays alone in its family and serves its own answer at once."""
    world = World()
    world.add("team-a", "org", group_spec("org", "acme"))
    world.add("team-c", "other", group_spec("org", "other"))
    world.add("team-g", "all", group_spec("global"))
    rec, sources, ledger = reconciler(world)
    sources.get("team-g/all").latest = answer(problem=Problem("GiteaUnauthorized", "401"))
    await rec.reconcile("team-g/all")
    for key in (ORG, "team-c/other"):
        sources.get(key).latest = answer(JOBS if key == ORG else ())
        await rec.reconcile(key)
    assert not ledger.has_peers(ORG) and not ledger.has_peers("team-c/other")
    assert world.created(ORG) == 3
