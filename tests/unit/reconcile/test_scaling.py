"""The capacity rule, over the situations a user would notice: a slow Pod, polls that
overlap, an empty queue, a full group, jobs the group cannot run, idle runners."""

import pytest

from gitea_runner_operator.api.gitea import ActionJob, ActionRunner
from gitea_runner_operator.api.naming import runner_pattern, runner_prefix
from gitea_runner_operator.api.observation import Observation
from gitea_runner_operator.objects.views import RunnerJobView
from gitea_runner_operator.reconcile.scaling import (
    ReapReason,
    RunnerState,
    desired_new_runners,
    matching_demand,
    plan,
    start_failure,
    teardown,
)

UID = "2b9f6c1e-0000-4000-8000-000000000001"
P = runner_prefix("ci", UID)  # "ci-<hash8>-"

OFFERED = frozenset({"ubuntu-latest", "linux"})
NOW = 10_000.0


def queued(n, labels=("ubuntu-latest",), status="queued"):
    return tuple(ActionJob(id=i, labels=labels, status=status) for i in range(1, n + 1))


def job(
    name,
    *,
    age=30.0,
    pods=(),
    finished=False,
    took=False,
    deleting=False,
    started_ago=None,
    problem=None,
    unschedulable_for=None,
    all_pods=None,
):
    return RunnerJobView(
        name=name,
        created_at=NOW - age,
        finished=finished,
        deleting=deleting,
        took_job=took,
        pod_names=tuple(pods),
        started_at=None if started_ago is None else NOW - started_ago,
        pod_problem=problem,
        unschedulable_since=None if unschedulable_for is None else NOW - unschedulable_for,
        all_pod_names=tuple(pods if all_pods is None else all_pods),
    )


def runner(name, *, busy=False, status="online", ephemeral=True, rid=None):
    return ActionRunner(
        id=rid or abs(hash(name)) % 10_000, name=name, busy=busy, status=status, ephemeral=ephemeral
    )


def decide(
    jobs=(),
    queued_jobs=(),
    runners=(),
    max_active=5,
    pending=0,
    idle=600.0,
    startup=600.0,
    complete=True,
    blocked=False,
    min_idle=0,
):
    return plan(
        group_name="ci",
        group_uid=UID,
        jobs=list(jobs),
        observation=Observation(
            queued=tuple(queued_jobs), runners=tuple(runners), runners_complete=complete
        ),
        offered=OFFERED,
        max_active=max_active,
        idle_timeout=idle,
        startup_timeout=startup,
        now=NOW,
        pending_creations=pending,
        creation_blocked=blocked,
        min_idle=min_idle,
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


def test_idle_and_never_started_runners_past_their_timeouts_are_proposed_for_reaping():
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
    by_job = {c.job_name: c for c in decision.reap}
    assert set(by_job) == {"ci-idle", "ci-starting"}
    assert by_job["ci-idle"].reason is ReapReason.IDLE
    assert by_job["ci-idle"].runner_ids == (7,)
    assert by_job["ci-starting"].reason is ReapReason.STARTUP_TIMEOUT


def test_idle_time_counts_from_the_pod_start_not_the_job_creation():
    # The Pod waited 9 minutes for a node, then registered 1 minute ago: not idle for long.
    late = job("ci-late", age=600, pods=["ci-late-p"], started_ago=60)
    decision = decide(jobs=[late], runners=[runner("ci-late-p")], idle=300)
    assert decision.reap == ()
    old = job("ci-late", age=600, pods=["ci-late-p"], started_ago=301)
    assert [c.job_name for c in decide(jobs=[old], runners=[runner("ci-late-p")], idle=300).reap]


def test_starting_runners_get_the_startup_timeout_not_the_idle_timeout():
    slow = job("ci-slow", age=400, pods=["ci-slow-p"])
    assert decide(jobs=[slow], idle=300, startup=600).reap == ()
    assert decide(jobs=[slow], idle=300, startup=300).reap[0].reason is ReapReason.STARTUP_TIMEOUT


def test_a_runner_idle_while_matching_jobs_wait_is_flagged():
    idle = job("ci-idle", age=700, pods=["ci-idle-p"], started_ago=700)
    decision = decide(jobs=[idle], runners=[runner("ci-idle-p")], queued_jobs=queued(2))
    assert decision.reap[0].reason is ReapReason.IDLE_WITH_DEMAND


def test_creation_held_back_creates_nothing_but_still_counts():
    decision = decide(queued_jobs=queued(3), blocked=True)
    assert decision.create == 0 and decision.demand == 3


def test_pods_that_cannot_start_are_reported_in_their_own_words():
    stuck = job("ci-a", pods=["ci-a-p"], problem="Pod ci-a-p: ImagePullBackOff: not found")
    unschedulable = job("ci-b", pods=["ci-b-p"], unschedulable_for=300)
    no_pod = job("ci-c", age=120, pods=[])
    fine = job("ci-d", pods=["ci-d-p"], unschedulable_for=10)
    decision = decide(jobs=[stuck, unschedulable, no_pod, fine])
    assert len(decision.start_failures) == 3
    assert "ImagePullBackOff" in decision.start_failures[0]
    assert "unschedulable" in decision.start_failures[1]
    assert "no Pod was created" in decision.start_failures[2]
    assert start_failure(fine, NOW) is None


def test_nobody_is_reaped_when_the_runner_list_was_cut_short():
    decision = decide(
        jobs=[job("ci-idle", age=601, pods=["p"])], runners=[runner("p")], complete=False
    )
    assert decision.reap == ()


def test_offline_registrations_left_by_dead_pods_are_removed():
    runners = [
        runner(P + "bcdfg-hjklm", status="offline", rid=1),  # ours, Pod gone
        runner(P + "bcdfg-zzzzz", status="online", rid=2),  # online: leave it
        runner("ci-abcde-fghjk", status="offline", rid=3),  # old scheme: not provably ours
        runner(P + "klmnp-qrstv", status="offline", rid=4, ephemeral=False),  # not ephemeral
        runner(P + "xwzbc-cdfgh", status="offline", rid=5),  # Pod still exists (restarting)
        runner(P + "bbbbb-ccccc", status="offline", rid=6, busy=True),  # busy: never
    ]
    live = job(P + "xwzbc", pods=[P + "xwzbc-cdfgh"])
    decision = decide(jobs=[live], runners=runners)
    assert [o.runner_id for o in decision.orphans] == [1]


def test_registrations_of_a_same_named_group_in_another_namespace_are_never_ours():
    other = runner_prefix("ci", "another-uid")  # team-b's "ci"
    assert other != P
    runners = [runner(other + "bcdfg-hjklm", status="offline", rid=1)]
    assert decide(runners=runners).orphans == ()


def test_runner_pattern_does_not_claim_other_groups():
    pattern = runner_pattern("ci", UID)
    assert pattern.match(P + "bcdfg-hjklm")
    assert not pattern.match(runner_prefix("ci-x", UID) + "bcdfg-hjklm")
    assert not pattern.match("ci-bcdfg-hjklm")
    assert not pattern.match(P + "bcdfg-hjklm-extra")


def test_teardown_reaps_idle_now_lets_busy_drain_then_forces():
    idle = job(P + "ggggg", pods=[P + "ggggg-hhhhh"])
    busy = job(P + "ccccc", pods=[P + "ccccc-ddddd"])
    regs = [runner(P + "ggggg-hhhhh", rid=1), runner(P + "ccccc-ddddd", busy=True, rid=2)]
    obs = Observation(queued=(), runners=tuple(regs))
    draining = teardown(
        group_name="ci", group_uid=UID, jobs=[idle, busy], observation=obs, drained=False
    )
    assert [c.job_name for c in draining.reap] == [P + "ggggg"]
    assert draining.force_delete == () and draining.busy == 1 and not draining.done
    late = teardown(
        group_name="ci", group_uid=UID, jobs=[idle, busy], observation=obs, drained=True
    )
    assert late.force_delete == (P + "ccccc",)
    gone = teardown(
        group_name="ci",
        group_uid=UID,
        jobs=[],
        observation=Observation(queued=(), runners=()),
        drained=False,
    )
    assert gone.done


def test_teardown_removes_idle_registrations_whose_pods_are_gone_even_if_online():
    regs = [runner(P + "ggggg-hhhhh", rid=1, status="online")]
    plan_ = teardown(
        group_name="ci",
        group_uid=UID,
        jobs=[],
        observation=Observation(queued=(), runners=tuple(regs)),
        drained=False,
    )
    assert [o.runner_id for o in plan_.orphans] == [1]
    assert not plan_.orphans[0].require_offline
    assert not plan_.done


def test_warm_runners_are_kept_beyond_demand_within_the_maximum():
    assert decide(min_idle=2).create == 2
    assert decide(queued_jobs=queued(3), min_idle=2).create == 5
    assert decide(queued_jobs=queued(3), min_idle=2, max_active=4).create == 4


def test_a_warm_runner_is_not_reaped_for_idling_only_recycled_when_old():
    idle = job("ci-w", age=4000, pods=["ci-w-p"], started_ago=3000)
    runners = [runner("ci-w-p")]
    assert decide(jobs=[idle], runners=runners, min_idle=1).reap == ()
    old = job("ci-w", age=4000, pods=["ci-w-p"], started_ago=3700)
    (recycled,) = decide(jobs=[old], runners=runners, min_idle=1).reap
    assert recycled.reason is ReapReason.WARM_RECYCLED
    # Beyond the warm pool, idle runners are reaped as usual, the oldest first.
    two = [idle, job("ci-x", age=4000, pods=["ci-x-p"], started_ago=3500)]
    reaped = decide(jobs=two, runners=[*runners, runner("ci-x-p")], min_idle=1).reap
    assert [c.job_name for c in reaped] == ["ci-x"]


def test_a_pod_whose_node_never_makes_its_sandbox_is_reported_with_the_likely_cause():
    import dataclasses

    refused = dataclasses.replace(
        job("ci-a", pods=["ci-a-p"]), sandbox_missing_since=NOW - 90
    )  # a runtime without user namespaces refuses a dind-userns Pod's sandbox, forever
    starting = dataclasses.replace(job("ci-b", pods=["ci-b-p"]), sandbox_missing_since=NOW - 5)
    message = start_failure(refused, NOW)
    assert message is not None and "sandbox" in message and "user namespaces" in message
    assert "dind or dind-rootless explicitly" in message
    assert start_failure(starting, NOW) is None  # a sandbox takes seconds to make
