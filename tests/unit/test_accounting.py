"""Exact accounting across groups that could serve the same jobs: each queued job counts for
exactly one group, by a fixed rule (most specific scope, then spare capacity, then name)."""

from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.reconcile.accounting import (
    Claimant,
    assign,
    component,
    freshest_view,
    job_repository,
    overlaps,
)

LINUX = frozenset({"linux"})


def job(i, repo="acme/app", labels=("linux",)):
    return ActionJob(
        id=i,
        labels=labels,
        status="queued",
        url=f"https://g.test/api/v1/repos/{repo}/actions/jobs/{i}",
    )


def group(key, scope, org=None, repo=None, *, spare=5, not_busy=0, offered=LINUX):
    return Claimant(key, scope, org, repo, offered, not_busy=not_busy, spare=spare)


ORG = group("team-a/org", Scope.ORG, "acme")
REPO = group("team-b/app", Scope.REPO, "acme", "app")


def counts(assigned):
    return {k: [j.id for j in v] for k, v in assigned.items()}


def test_the_repository_is_read_from_the_jobs_url():
    assert job_repository(job(1, "Acme/App")) == ("Acme", "App")
    assert job_repository(ActionJob(id=1, status="queued")) is None


def test_the_most_specific_scope_takes_its_own_jobs_and_the_org_the_rest():
    jobs = [job(1), job(2), job(3, "acme/other")]
    assert counts(assign(jobs, [ORG, REPO])) == {"team-a/org": [3], "team-b/app": [1, 2]}


def test_every_job_is_counted_exactly_once_whatever_the_order_of_groups():
    jobs = [job(i, "acme/app" if i % 2 else "acme/lib") for i in range(1, 21)]
    for groups in ([ORG, REPO], [REPO, ORG]):
        assigned = assign(jobs, groups)
        ids = sorted(j.id for v in assigned.values() for j in v)
        assert ids == list(range(1, 21))


def test_a_full_first_choice_spills_to_the_next_group():
    full = group("team-b/app", Scope.REPO, "acme", "app", spare=1)
    assert counts(assign([job(1), job(2), job(3)], [ORG, full])) == {
        "team-a/org": [2, 3],
        "team-b/app": [1],
    }


def test_starting_and_idle_runners_count_as_room():
    busy_but_covered = group("team-b/app", Scope.REPO, "acme", "app", spare=0, not_busy=2)
    assert counts(assign([job(1), job(2), job(3)], [ORG, busy_but_covered]))["team-b/app"] == [
        1,
        2,
    ]


def test_when_nobody_has_room_the_first_choice_counts_it_and_shows_at_capacity():
    full_org = group("team-a/org", Scope.ORG, "acme", spare=0)
    full_repo = group("team-b/app", Scope.REPO, "acme", "app", spare=0)
    assert counts(assign([job(1)], [full_org, full_repo])) == {
        "team-a/org": [],
        "team-b/app": [1],
    }


def test_ties_are_broken_by_spare_capacity_then_name():
    a = group("ns/a", Scope.ORG, "acme", spare=2)
    b = group("ns/b", Scope.ORG, "acme", spare=3)
    c = group("ns/c", Scope.ORG, "acme", spare=3)
    assert counts(assign([job(1)], [a, b, c]))["ns/b"] == [1]


def test_jobs_only_one_group_can_run_go_to_it():
    gpu = group("ns/gpu", Scope.ORG, "acme", offered=frozenset({"linux", "gpu"}))
    jobs = [job(1, labels=("linux", "gpu")), job(2)]
    assert counts(assign(jobs, [REPO, gpu])) == {"team-b/app": [2], "ns/gpu": [1]}


def test_overlap_needs_shared_labels_and_intersecting_scopes():
    assert overlaps(ORG, REPO)
    assert not overlaps(ORG, group("x/y", Scope.ORG, "other"))
    assert not overlaps(ORG, group("x/y", Scope.ORG, "acme", offered=frozenset({"win"})))
    assert overlaps(group("x/g", Scope.GLOBAL), REPO)
    assert not overlaps(REPO, group("x/r", Scope.REPO, "acme", "lib"))
    other = group("x/o", Scope.ORG, "other")
    claimants = {c.key: c for c in (ORG, REPO, other)}
    assert [c.key for c in component("team-b/app", claimants)] == ["team-a/org", "team-b/app"]


def test_a_fresher_answer_that_no_longer_lists_a_job_wins():
    old = (ORG, 1.0, [job(1), job(2)])
    new = (REPO, 5.0, [job(2)])  # job 1 (acme/app) was taken since the org answer
    assert [j.id for j in freshest_view([old, new])] == [2]
    elsewhere = (ORG, 9.0, [job(3, "acme/lib")])
    assert [j.id for j in freshest_view([old, new, elsewhere])] == [3]


def test_runners_that_exist_in_another_group_cover_jobs_before_new_ones_are_counted():
    """The org group started runners for the repo's jobs before the repo group appeared:
    those runners cover the jobs; the repo group must not start a second set."""
    started = group("team-a/org", Scope.ORG, "acme", spare=6, not_busy=4)
    assert counts(assign([job(1), job(2), job(3), job(4)], [started, REPO])) == {
        "team-a/org": [1, 2, 3, 4],
        "team-b/app": [],
    }
