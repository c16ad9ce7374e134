"""The capacity rule, over the situations a user would notice: a slow Pod, polls that
overlap, an empty queue, a full group, jobs the group cannot run, idle runners."""

import pytest

from gitea_runner_operator.forge.models import ActionJob, ActionRunner
from gitea_runner_operator.kube.views import RunnerJobView
from gitea_runner_operator.reconcile.scaling import (
    Observation,
    RunnerState,
    desired_new_runners,
    matches,
    matching_demand,
    plan,
    runner_name_pattern,
)

OFFERED = frozenset({"ubuntu-latest", "linux"})
NOW = 10_000.0


def queued(n, labels=("ubuntu-latest",), status="queued"):
    return tuple(ActionJob(id=i, labels=labels, status=status) for i in range(1, n + 1))


def job(name, *, age=30.0, pods=(), finished=False, took=False, deleting=False):
    return RunnerJobView(
        name=name,
        created_at=NOW - age,
        finished=finished,
        deleting=deleting,
        took_job=took,
        pod_names=tuple(pods),
    )


def runner(name, *, busy=False, status="online", ephemeral=True, rid=None):
    return ActionRunner(
        id=rid or abs(hash(name)) % 10_000, name=name, busy=busy, status=status, ephemeral=ephemeral
    )


def decide(jobs=(), queued_jobs=(), runners=(), max_active=5, pending=0, idle=600.0, complete=True):
    return plan(
        group_name="ci",
        jobs=list(jobs),
        observation=Observation(
            queued=tuple(queued_jobs), runners=tuple(runners), runners_complete=complete
        ),
        offered=OFFERED,
        max_active=max_active,
        idle_timeout=idle,
        now=NOW,
        pending_creations=pending,
    )


@pytest.mark.parametrize(
    ("demand", "alive", "not_busy", "max_active", "expected"),
    [
        (0, 0, 0, 5, 0),  # nothing queued: nothing started
        (3, 0, 0, 5, 3),  # one runner per queued job
        (10, 0, 0, 4, 4),  # never past the maximum
        (3, 4, 0, 4, 0),  # maximum reached: wait
        (3, 3, 3, 10, 0),  # three starting runners already cover three jobs
        (5, 3, 3, 10, 2),  # ... and two more jobs need two more
        (1, 2, 2, 10, 0),  # more idle runners than jobs: never negative
    ],
)
def test_desired_new_runners(demand, alive, not_busy, max_active, expected):
    assert (
        desired_new_runners(demand=demand, alive=alive, not_busy=not_busy, max_active=max_active)
        == expected
    )


def test_matching_is_all_of_the_jobs_labels():
    assert matches(["ubuntu-latest"], OFFERED)
    assert matches(["ubuntu-latest", "linux"], OFFERED)
    assert not matches(["ubuntu-latest", "gpu"], OFFERED)
    assert not matches(["Ubuntu-Latest"], OFFERED)  # exact, case-sensitive, like Gitea


def test_only_queued_jobs_are_demand():
    jobs = (
        *queued(2),
        *queued(3, status="waiting"),
        ActionJob(id=9, labels=("gpu",), status="queued"),
    )
    assert [j.id for j in matching_demand(jobs, OFFERED)] == [1, 2]


def test_first_poll_starts_one_runner_per_matching_job():
    decision = decide(queued_jobs=queued(3))
    assert (decision.create, decision.demand, decision.alive) == (3, 3, 0)


def test_jobs_the_group_cannot_run_start_nothing():
    decision = decide(queued_jobs=queued(4, labels=("windows",)))
    assert decision.create == 0
    assert decision.demand == 0


def test_slow_starting_pods_are_not_doubled_on_later_polls():
    # Three Jobs created a minute ago; their Pods are still pulling the image, so no runner
    # has registered. The same three jobs are still queued.
    jobs = [job(f"ci-{i}", age=60, pods=[f"ci-{i}-pod"]) for i in range(3)]
    for _ in range(5):  # poll after poll
        decision = decide(jobs=jobs, queued_jobs=queued(3))
        assert decision.create == 0
        assert decision.not_busy == 3


def test_jobs_created_but_not_yet_seen_by_the_informer_count():
    # Overlapping passes: the first created two Jobs; the watch has not delivered them.
    decision = decide(queued_jobs=queued(3), pending=2)
    assert decision.create == 1
    assert decision.alive == 2


def test_busy_runners_do_not_cover_new_demand():
    jobs = [job("ci-a", pods=["ci-a-p"]), job("ci-b", pods=["ci-b-p"])]
    runners = [runner("ci-a-p", busy=True), runner("ci-b-p", busy=True)]
    decision = decide(jobs=jobs, queued_jobs=queued(2), runners=runners)
    assert decision.create == 2
    assert decision.states == {"ci-a": RunnerState.BUSY, "ci-b": RunnerState.BUSY}
    assert decision.mark_took_job == ("ci-a", "ci-b")


def test_a_runner_that_took_its_job_stays_busy_after_gitea_forgets_it():
    # Gitea deletes an ephemeral runner when its task ends; the Pod may still be exiting.
    decision = decide(jobs=[job("ci-a", pods=["ci-a-p"], took=True)], queued_jobs=queued(1))
    assert decision.states["ci-a"] is RunnerState.BUSY
    assert decision.create == 1


def test_idle_registered_runner_covers_one_job():
    decision = decide(
        jobs=[job("ci-a", pods=["ci-a-p"])], queued_jobs=queued(1), runners=[runner("ci-a-p")]
    )
    assert decision.states["ci-a"] is RunnerState.IDLE
    assert decision.create == 0


def test_finished_and_deleting_jobs_free_their_slot():
    jobs = [job("ci-a", finished=True), job("ci-b", deleting=True)]
    decision = decide(jobs=jobs, queued_jobs=queued(2), max_active=2)
    assert decision.alive == 0
    assert decision.create == 2


def test_maximum_counts_busy_runners_too():
    jobs = [job(f"ci-{i}", took=True) for i in range(4)]
    decision = decide(jobs=jobs, queued_jobs=queued(10), max_active=5)
    assert decision.create == 1


def test_empty_queue_after_work_is_done_starts_nothing():
    decision = decide(jobs=[job("ci-a", finished=True, took=True)], queued_jobs=())
    assert decision.create == 0


def test_idle_runners_past_the_timeout_are_reaped_and_deregistered():
    jobs = [
        job("ci-idle", age=601, pods=["ci-idle-aaaaa"]),
        job("ci-starting", age=700, pods=["ci-starting-p"]),
        job("ci-young", age=10, pods=["ci-young-p"]),
        job("ci-busy", age=3600, pods=["ci-busy-p"]),
    ]
    runners = [
        runner("ci-idle-aaaaa", rid=7),
        runner("ci-young-p", rid=8),
        runner("ci-busy-p", busy=True, rid=9),
    ]
    decision = decide(jobs=jobs, runners=runners)
    assert set(decision.reap) == {"ci-idle", "ci-starting"}
    assert decision.deregister == (7,)


def test_nobody_is_reaped_when_the_runner_list_was_cut_short():
    decision = decide(
        jobs=[job("ci-idle", age=601, pods=["p"])], runners=[runner("p")], complete=False
    )
    assert decision.reap == ()


def test_offline_registrations_left_by_dead_pods_are_removed():
    runners = [
        runner("ci-abcde-fghij", status="offline", rid=1),  # ours, Pod gone
        runner("ci-abcde-zzzzz", status="online", rid=2),  # online: leave it
        runner("other-abcde-fghij", status="offline", rid=3),  # another group's
        runner("ci-klmno-pqrst", status="offline", rid=4, ephemeral=False),  # not ephemeral
        runner("ci-xyzab-cdefg", status="offline", rid=5),  # Pod still alive (restarting)
    ]
    decision = decide(jobs=[job("ci-xyzab", pods=["ci-xyzab-cdefg"])], runners=runners)
    assert decision.deregister == (1,)


def test_runner_name_pattern_does_not_claim_other_groups():
    pattern = runner_name_pattern("ci")
    assert pattern.match("ci-abcde-fghij")
    assert not pattern.match("ci-x-abcde-fghij")  # group "ci-x"
    assert not pattern.match("cid-abcde-fghij")
