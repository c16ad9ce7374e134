"""The reconciler's choreography over in-memory stand-ins for the cache, the API server and
the poll tasks. The real API server and Gitea are exercised by the integration suite; these
pin down what a user relies on between them: restarts and fast watches do not double or
starve runners, bad specs and refused creates become conditions, Gitea failures touch no Job
and erase nothing, reaps are only proposed (the poll task checks them against Gitea), and a
deleted group is torn down in order."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog

from gitea_runner_operator.api.cadence import Cadence, CadenceReason
from gitea_runner_operator.api.gitea import ActionRunner
from gitea_runner_operator.api.hooks import HookStatus
from gitea_runner_operator.api.observation import Problem
from gitea_runner_operator.kube.cache import Release
from gitea_runner_operator.reconcile.expectations import Expectations
from gitea_runner_operator.reconcile.reconciler import FINALIZER, Reconciler
from gitea_runner_operator.reconcile.scaling import ReapReason
from gitea_runner_operator.reconcile.steps.marks import MARKS_PER_PASS
from tests.support.builders import VALID
from tests.support.fake_cluster import (
    HOOKED,
    KEY,
    T0,
    Clock,
    FakeCache,
    FakeCluster,
    FakeSources,
    first_runner,
    make,
    runner_pod,
    snapshot,
    took_job,
)


def condition(cluster: FakeCluster, kind: str) -> dict[str, Any]:
    assert cluster.status is not None
    (cond,) = [c for c in cluster.status["conditions"] if c["type"] == kind]
    return cond


async def test_creates_up_to_the_maximum_and_reports_status():
    cluster = FakeCluster()
    reconciler, _, _ = make(cluster, snapshot(queued=5))
    await reconciler.reconcile(KEY)
    assert len(cluster.unsynced) == 3
    assert cluster.status is not None
    assert cluster.status["activeRunners"] == 3
    assert cluster.status["queuedJobs"] == 5
    assert cluster.status["runners"] == {"starting": 3, "idle": 0, "busy": 0}
    assert cluster.status["target"] == "acme/widgets"
    assert condition(cluster, "Ready")["reason"] == "AtCapacity"
    assert ("Normal", "RunnersCreated") in cluster.events
    assert condition(cluster, "RunnersHealthy")["status"] == "True"


async def test_job_names_carry_the_group_uid_hash():
    cluster = FakeCluster()
    reconciler, _, _ = make(cluster, snapshot(queued=1))
    await reconciler.reconcile(KEY)
    (job,) = cluster.unsynced
    assert job["metadata"]["name"].startswith("ci-") and len(job["metadata"]["name"]) == 17


async def test_the_finalizer_is_added_before_anything_else():
    cluster = FakeCluster()
    cluster.finalizers = ["someone.else/keep"]
    reconciler, _, _ = make(cluster, snapshot(queued=2))
    await reconciler.reconcile(KEY)
    assert cluster.finalizers == ["someone.else/keep", FINALIZER]
    assert cluster.creates == 0  # the next pass, with the updated object, creates


async def test_failed_runner_jobs_turn_runners_healthy_false_and_warn_once():
    cluster = FakeCluster()
    job = cluster.jobs[await first_runner(cluster)]
    job["status"] = {"conditions": [{"type": "Failed", "status": "True"}]}
    again, _, _ = make(cluster, snapshot(queued=1))
    for _ in range(2):
        await again.reconcile(KEY)
    healthy = condition(cluster, "RunnersHealthy")
    assert (healthy["status"], healthy["reason"]) == ("False", "RunnerJobsFailed")
    assert cluster.events.count(("Warning", "RunnerJobsFailed")) == 1
    assert len(cluster.unsynced) == 1  # the job is still queued: a new runner is started


async def test_a_second_pass_before_the_watch_catches_up_creates_nothing():
    cluster = FakeCluster()
    reconciler, _, _ = make(cluster, snapshot(queued=2))
    await reconciler.reconcile(KEY)
    await reconciler.reconcile(KEY)  # the watch has not delivered the two Jobs yet
    assert len(cluster.unsynced) == 2


async def test_a_watch_faster_than_the_create_is_not_counted_twice():
    """The Jobs are in the cache before their creates return. Counting them as seen *and*
    as expected would report 4 runners and, when demand grows, start none for it."""
    cluster = FakeCluster(watch="eager")
    reconciler, sources, _ = make(cluster, snapshot(queued=2), {**VALID, "maxActiveRunners": 6})
    await reconciler.reconcile(KEY)
    assert len(cluster.jobs) == 2
    assert cluster.status is not None and cluster.status["activeRunners"] == 2
    sources.source.latest = snapshot(queued=4)  # two more jobs queued; two runners starting
    await reconciler.reconcile(KEY)
    assert len(cluster.jobs) == 4


class RoundCounting(FakeCluster):
    """Counts round trips: creates sent together (one batch) are one round."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rounds = 0
        self._in_flight = 0

    async def create_job(self, manifest: dict[str, Any]) -> str:
        if self._in_flight == 0:
            self.rounds += 1
        self._in_flight += 1
        await asyncio.sleep(0)
        self._in_flight -= 1
        return await super().create_job(manifest)


async def test_a_group_whose_creates_went_through_creates_the_next_ones_in_one_round():
    # A busy group creates a few dozen replacements a pass; each doubling batch is a round
    # trip the pass, and the Pod events queued behind it, wait for (issue 27).
    cluster = RoundCounting(watch="eager")
    reconciler, sources, _ = make(cluster, snapshot(queued=15), {**VALID, "maxActiveRunners": 30})
    await reconciler.reconcile(KEY)
    assert len(cluster.jobs) == 15 and cluster.rounds == 4  # slow start: 1, 2, 4, 8
    sources.source.latest = snapshot(queued=23)  # eight more queued
    await reconciler.reconcile(KEY)
    assert len(cluster.jobs) == 23 and cluster.rounds == 5  # all eight in one round


async def test_a_refused_create_starts_the_slow_start_again():
    cluster = RoundCounting(watch="eager")
    clock = Clock()
    spec = {**VALID, "maxActiveRunners": 30}
    reconciler, sources, _ = make(cluster, snapshot(queued=7), spec, clock=clock)
    await reconciler.reconcile(KEY)
    cluster.refuse = 'jobs "x" is forbidden: exceeded quota'
    sources.source.latest = snapshot(queued=12)  # five more
    await reconciler.reconcile(KEY)
    assert cluster.creates == 7 + 4  # one batch of 4 (the last pass's largest), refused
    cluster.refuse = None
    clock.now += 3600
    rounds = cluster.rounds
    await reconciler.reconcile(KEY)
    assert len(cluster.jobs) == 12
    assert cluster.rounds - rounds == 3  # 1, 2, 2: slow start again after a refusal


async def test_a_restarted_operator_counts_the_jobs_in_the_cluster():
    cluster = FakeCluster()
    first, _, _ = make(cluster, snapshot(queued=2))
    await first.reconcile(KEY)
    cluster.sync()
    restarted, _, _ = make(cluster, snapshot(queued=2))  # fresh memory, same cluster
    await restarted.reconcile(KEY)
    assert len(cluster.jobs) == 2 and not cluster.unsynced


async def test_a_runner_marked_as_having_taken_its_job_no_longer_covers_demand():
    cluster = FakeCluster()
    name = await first_runner(cluster)
    took_job(cluster, name)
    again, _, _ = make(cluster, snapshot(queued=1))
    await again.reconcile(KEY)
    assert len(cluster.unsynced) == 1  # the busy one no longer covers the new job


async def test_a_runner_that_finished_after_the_snapshot_still_covers_one_job():
    """Churn: a runner finished after Gitea was asked; that answer may still list the job
    it took as queued. The pass goes on (no stall) but starts one runner fewer, and asks
    Gitea again."""
    cluster = FakeCluster()
    reconciler, sources, cache = make(cluster, snapshot(queued=2, started_at=5.0))
    cache.released = [Release(6.0, "ci-old1", took_job=False)]
    await reconciler.reconcile(KEY)
    assert cluster.creates == 1 and sources.source.woken == 1


async def test_finished_runners_the_snapshot_saw_busy_or_before_it_cover_nothing():
    """Only a runner that could have taken a listed job covers one: one marked as having
    taken its job, one the answer saw busy, or one that finished before the answer was
    asked for had a job that the answer does not list as queued."""
    busy = ActionRunner(id=9, name="ci-old2-abcde", status="online", busy=True, ephemeral=True)
    cluster = FakeCluster()
    reconciler, _, cache = make(cluster, snapshot(queued=3, runners=(busy,), started_at=5.0))
    cache.released = [
        Release(6.0, "ci-old1", took_job=True),
        Release(6.0, "ci-old2", took_job=False),
        Release(4.0, "ci-old3", took_job=False),
    ]
    await reconciler.reconcile(KEY)
    assert cluster.creates == 3


def test_the_churn_rule_never_starts_more_runners_than_jobs_remain():
    """Whatever the finished runners took (any number up to how many finished, each one of
    the listed jobs), the runners that will look for a job after this pass (not busy ones
    plus new ones) never outnumber the jobs still really queued."""
    from gitea_runner_operator.reconcile.scaling import desired_new_runners

    for queued in range(6):
        for finished in range(6):
            for not_busy in range(6):
                new = desired_new_runners(
                    demand=queued, alive=not_busy, not_busy=not_busy + finished, max_active=50
                )
                for taken in range(min(finished, queued) + 1):
                    assert new == 0 or not_busy + new <= queued - taken


async def test_invalid_spec_becomes_a_condition_and_stops_polling():
    cluster = FakeCluster()
    reconciler, sources, _ = make(
        cluster, snapshot(queued=3), spec={**VALID, "maxActiveRunners": 0}
    )
    await reconciler.reconcile(KEY)
    assert not cluster.unsynced
    cond = condition(cluster, "Ready")
    assert (cond["status"], cond["reason"]) == ("False", "InvalidSpec")
    assert "spec.maxActiveRunners" in cond["message"]
    assert sources.stopped == [KEY]
    assert ("Warning", "InvalidSpec") in cluster.events


async def test_gitea_failure_changes_no_jobs_keeps_other_conditions_and_says_why():
    cluster = FakeCluster()
    cluster.status = {
        "conditions": [
            {"type": "RunnersHealthy", "status": "False", "reason": "RunnerJobsFailed"},
        ]
    }
    reconciler, _, _ = make(
        cluster, snapshot(problem=Problem("GiteaUnauthorized", "401: the auth token was rejected"))
    )
    with structlog.testing.capture_logs() as logs:
        await reconciler.reconcile(KEY)
    assert not cluster.unsynced and not cluster.deleted
    cond = condition(cluster, "Ready")
    assert (cond["status"], cond["reason"]) == ("False", "GiteaUnauthorized")
    assert ("Warning", "GiteaUnauthorized") in cluster.events
    # The failure reaches the operator's log too, once, with group and reason.
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert warnings and warnings[0]["group"] == KEY
    assert warnings[0]["reason"] == "GiteaUnauthorized"


async def test_a_persisting_failure_is_logged_again_only_after_the_reminder_interval():
    cluster = FakeCluster()
    clock = Clock()
    reconciler, _, _ = make(
        cluster, snapshot(problem=Problem("GiteaServerError", "HTTP 500")), clock=clock
    )
    with structlog.testing.capture_logs() as logs:
        for _ in range(5):
            await reconciler.reconcile(KEY)
        clock.now += 601
        await reconciler.reconcile(KEY)
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == [
        "group not working",
        "group still not working",
    ]


async def test_a_refused_create_is_reported_backs_off_and_tries_one_not_all():
    cluster = FakeCluster()
    cluster.refuse = 'jobs "x" is forbidden: exceeded quota: runners, requested: count/jobs=1'
    clock = Clock()
    reconciler, _, _ = make(
        cluster, snapshot(queued=8), {**VALID, "maxActiveRunners": 8}, clock=clock
    )
    result = await reconciler.reconcile(KEY)
    assert cluster.creates == 1  # slow start: the first refusal stops the burst
    healthy = condition(cluster, "RunnersHealthy")
    assert healthy["reason"] == "JobCreateRefused" and "exceeded quota" in healthy["message"]
    assert ("Warning", "JobCreateRefused") in cluster.events
    assert result.requeue_after is not None and result.requeue_after > 0
    cluster.refuse = None
    clock.now += 1.0  # a group's status is patched at most once a second
    await reconciler.reconcile(KEY)
    assert cluster.creates == 1  # within the back-off: not tried again
    clock.now += result.requeue_after  # the pass the back-off asked for
    await reconciler.reconcile(KEY)
    assert condition(cluster, "RunnersHealthy")["status"] == "True"


async def test_idle_runners_are_proposed_to_the_poll_task_never_deleted_here():
    cluster = FakeCluster()
    name = await first_runner(cluster)
    pod = f"{name}-bcdfg"
    cluster.pods = [runner_pod(name, pod)]
    late = T0 + 3600  # an hour later, nothing queued, the runner idle
    again, sources, _ = make(cluster, snapshot(runners=(ActionRunner(id=5, name=pod),)), wall=late)
    await again.reconcile(KEY)
    assert cluster.deleted == []
    (order,) = sources.source.orders
    (candidate,) = order.candidates
    assert (candidate.job_name, candidate.reason, candidate.runner_ids) == (
        name,
        ReapReason.IDLE,
        (5,),
    )


async def test_a_tenants_pod_or_job_named_like_another_teams_runner_is_not_the_groups():
    """Team-a creates, in its own namespace, a Pod labelled as its runner Job's Pod but named
    like another team's runner, and a Job named like another team's Forgejo runner: neither
    registration becomes team-a's to disable or delete. A runner Job's Pods are named after
    it, and a runner Job carries its group's name pattern."""
    import copy

    from gitea_runner_operator.api.naming import runner_prefix

    cluster = FakeCluster()
    name = await first_runner(cluster)
    own, theirs = f"{name}-bcdfg", runner_prefix("ci", "team-b-uid") + "hjklm-npqrs"
    theirs_job = runner_prefix("ci", "team-b-uid") + "tvwxz"
    forged = copy.deepcopy(cluster.jobs[name])
    forged["metadata"]["name"] = theirs_job
    cluster.put_jobs(forged)
    cluster.pods = [runner_pod(name, own), runner_pod(name, theirs)]
    runners = (ActionRunner(id=5, name=own), ActionRunner(id=9, name=theirs),
               ActionRunner(id=11, name=theirs_job))  # fmt: skip
    late = T0 + 3600  # an hour later, nothing queued: every runner of team-a is idle
    again, sources, _ = make(cluster, snapshot(runners=runners), wall=late)
    await again.reconcile(KEY)
    (order,) = sources.source.orders
    assert [(c.job_name, c.runner_ids, c.pod_names) for c in order.candidates] == [
        (name, (5,), (own,))
    ]
    assert all(o.runner_id == 5 for o in order.orphans)


async def test_runners_idle_while_jobs_wait_hold_creation_back_and_say_why():
    cluster = FakeCluster()
    name = await first_runner(cluster)
    pod = f"{name}-bcdfg"
    cluster.pods = [runner_pod(name, pod)]
    late = T0 + 3600
    stuck = snapshot(queued=1, runners=(ActionRunner(id=5, name=pod),))
    again, sources, _ = make(cluster, stuck, wall=late)
    result = await again.reconcile(KEY)
    assert sources.source.orders[0].candidates[0].reason is ReapReason.IDLE_WITH_DEMAND
    cluster.jobs.clear()  # the poll task reaped it
    cluster.pods = []
    await again.reconcile(KEY)
    assert cluster.creates == 1  # no replacement while backing off
    healthy = condition(cluster, "RunnersHealthy")
    assert healthy["reason"] == "RunnersNotTakingJobs"
    assert "label" in healthy["message"] and "registration token" in healthy["message"]
    assert result.requeue_after is not None


async def test_pods_that_cannot_start_turn_runners_healthy_false_with_their_reason():
    cluster = FakeCluster()
    name = await first_runner(cluster)
    waiting = {"waiting": {"reason": "ImagePullBackOff", "message": "pull access denied"}}
    cluster.pods = [
        runner_pod(
            name,
            f"{name}-bcdfg",
            phase="Pending",
            containerStatuses=[{"name": "runner", "state": waiting}],
        )
    ]
    again, _, _ = make(cluster, snapshot(queued=1))
    await again.reconcile(KEY)
    healthy = condition(cluster, "RunnersHealthy")
    assert healthy["reason"] == "RunnerPodsNotStarting"
    assert "ImagePullBackOff" in healthy["message"]
    assert cluster.creates == 1  # the stuck one still covers the job: no new Job per poll


async def test_teardown_drains_then_releases_the_finalizer():
    cluster = FakeCluster()
    name = await first_runner(cluster)
    pod = f"{name}-bcdfg"
    cluster.pods = [runner_pod(name, pod)]
    took_job(cluster, name)
    cluster.deletion = "2026-01-01T00:01:00Z"
    busy = snapshot(
        runners=(ActionRunner(id=5, name=pod, busy=True, ephemeral=True),), started_at=200.0
    )
    draining, _, _ = make(cluster, busy, wall=T0 + 90)  # 30 s into a 5 min drain
    await draining.reconcile(KEY)
    assert cluster.deleted == [] and FINALIZER in cluster.finalizers
    after, _, _ = make(cluster, busy, wall=T0 + 60 + 301)  # drain timeout passed
    await after.reconcile(KEY)
    assert cluster.deleted == [name]  # the busy runner is stopped now
    cluster.pods = []
    done, _, _ = make(cluster, snapshot(started_at=200.0), wall=T0 + 400)
    await done.reconcile(KEY)
    assert FINALIZER not in cluster.finalizers


async def test_teardown_never_trusts_a_snapshot_from_before_the_deletion():
    cluster = FakeCluster()
    cluster.deletion = "2026-01-01T00:01:00Z"
    old = snapshot(started_at=1.0)  # empty runner list, but asked before the deletion
    reconciler, sources, _ = make(cluster, old, wall=T0 + 90)
    await reconciler.reconcile(KEY)
    assert FINALIZER in cluster.finalizers and sources.source.woken >= 1


async def test_teardown_gives_up_after_the_drain_timeout_when_gitea_cannot_be_asked():
    cluster = FakeCluster()
    cluster.deletion = "2026-01-01T00:01:00Z"
    down = snapshot(problem=Problem("GiteaUnreachable", "no answer"), started_at=200.0)
    waiting, _, _ = make(cluster, down, wall=T0 + 90)
    await waiting.reconcile(KEY)
    assert FINALIZER in cluster.finalizers
    late, _, _ = make(cluster, down, wall=T0 + 60 + 301)
    await late.reconcile(KEY)
    assert FINALIZER not in cluster.finalizers
    assert ("Warning", "TeardownIncomplete") in cluster.events


async def test_only_busy_runner_pods_are_guarded_against_node_scale_down():
    cluster = FakeCluster()
    first, _, _ = make(cluster, snapshot(queued=2))
    await first.reconcile(KEY)
    cluster.sync()
    busy_job, idle_job = sorted(cluster.jobs)
    cluster.pods = [
        runner_pod(busy_job, f"{busy_job}-bcdfg"),
        runner_pod(idle_job, f"{idle_job}-bcdfg"),
    ]
    runners = (
        ActionRunner(id=1, name=f"{busy_job}-bcdfg", busy=True),
        ActionRunner(id=2, name=f"{idle_job}-bcdfg"),
    )
    again, _, _ = make(cluster, snapshot(queued=0, runners=runners))
    await again.reconcile(KEY)
    guarded = {
        p["metadata"]["name"]: (p["metadata"].get("annotations") or {}) for p in cluster.pods
    }
    assert guarded[f"{busy_job}-bcdfg"] == {
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
        "karpenter.sh/do-not-disrupt": "true",
    }
    assert guarded[f"{idle_job}-bcdfg"] == {}


async def test_a_create_whose_answer_was_lost_is_settled_at_once_by_its_name():
    """Under load a create can time out after the API server made the Job. Forgetting it
    would start a second runner for the same job on the next pass (seen at 1,000 groups:
    2,545 runner Jobs for 2,000 queued jobs); waiting for the watch left the job waiting
    when the Job was never made. The same name is sent again: AlreadyExists settles it."""
    cluster = FakeCluster()
    cluster.lose_answer = True
    reconciler, _, _ = make(cluster, snapshot(queued=1))
    await reconciler.reconcile(KEY)  # the pass does not fail
    assert cluster.creates == 2 and cluster.all_created == 1
    assert ("Normal", "RunnersCreated") in cluster.events
    cluster.lose_answer = False
    await reconciler.reconcile(KEY)  # the watch has not shown the Job yet
    assert cluster.creates == 2 and cluster.all_created == 1


async def test_a_create_that_never_arrived_is_sent_again_on_the_next_pass():
    """The connection broke before the API server had the Job, twice (an API server
    restart): the next pass sends the same name again rather than waiting for the
    expectation to lapse (300 s, and nothing brought the group back then)."""
    cluster = FakeCluster()
    cluster.drop_creates = 2
    reconciler, _, _ = make(cluster, snapshot(queued=1))
    with pytest.raises(ConnectionResetError):
        await reconciler.reconcile(KEY)  # failed: the controller retries it with back-off
    assert cluster.all_created == 0
    await reconciler.reconcile(KEY)
    assert cluster.all_created == 1 and cluster.creates == 3
    cluster.sync()
    await reconciler.reconcile(KEY)
    assert cluster.all_created == 1


async def test_an_expected_job_that_never_shows_brings_the_group_back_when_it_lapses():
    """A Job created and deleted before the watch showed it is expected until the
    expectation lapses: the pass asks to come back then, and creates for the job."""
    cluster = FakeCluster()
    clock = Clock()
    reconciler, _, _ = make(cluster, snapshot(queued=1), clock=clock)
    await reconciler.reconcile(KEY)
    cluster.unsynced.clear()  # deleted before the watch delivered it
    result = await reconciler.reconcile(KEY)
    assert cluster.creates == 1
    assert result.requeue_after is not None and 59.0 <= result.requeue_after <= 61.0
    clock.now += result.requeue_after
    await reconciler.reconcile(KEY)
    assert cluster.creates == 2 and cluster.all_created == 1


async def test_a_managed_hook_shows_as_the_webhook_condition_and_a_failure_warns_once():
    cluster = FakeCluster()
    clock = Clock()
    reconciler, sources, _ = make(cluster, snapshot(), spec=HOOKED, clock=clock)
    sources.source.hook = HookStatus(True, "HookRegistered", "hook 4 of organisation acme ...")
    await reconciler.reconcile(KEY)
    assert condition(cluster, "Webhook")["status"] == "True"
    sources.source.hook = HookStatus(False, "HookNotPermitted", "the API token may not ...")
    clock.now += 1.0  # a group's status is patched at most once a second
    await reconciler.reconcile(KEY)
    await reconciler.reconcile(KEY)
    cond = condition(cluster, "Webhook")
    assert (cond["status"], cond["reason"]) == ("False", "HookNotPermitted")
    assert condition(cluster, "Ready")["status"] == "True"  # polling goes on regardless
    assert cluster.events.count(("Warning", "HookNotPermitted")) == 1


async def test_the_status_says_which_poll_interval_is_in_force_and_why():
    cluster = FakeCluster()
    clock = Clock()
    reconciler, sources, _ = make(cluster, snapshot(), spec=HOOKED, clock=clock)
    sources.source.cadence = Cadence(300.0, CadenceReason.DELIVERING)
    await reconciler.reconcile(KEY)
    assert cluster.status is not None
    poll = cluster.status["poll"]
    assert (poll["interval"], poll["reason"]) == ("5m", "DeliveriesArrive")
    assert "missed delivery brings it back to 15s" in poll["message"]
    sources.source.cadence = Cadence(15.0, CadenceReason.MISSED)
    clock.now += 1.0
    await reconciler.reconcile(KEY)
    assert cluster.status["poll"]["interval"] == "15s"
    assert cluster.status["poll"]["reason"] == "MissedDelivery"


async def test_the_webhook_condition_goes_when_the_hook_is_no_longer_managed():
    cluster = FakeCluster()
    managed, sources, _ = make(cluster, snapshot(), spec=HOOKED)
    sources.source.hook = HookStatus(True, "HookRegistered", "...")
    await managed.reconcile(KEY)
    plain, _, _ = make(cluster, snapshot())
    await plain.reconcile(KEY)
    assert cluster.status is not None
    assert "Webhook" not in {c["type"] for c in cluster.status["conditions"]}


async def test_teardown_removes_the_managed_hook_before_releasing_the_finalizer():
    cluster = FakeCluster()
    cluster.deletion = "2026-01-01T00:01:00Z"
    reconciler, sources, _ = make(cluster, snapshot(started_at=200.0), spec=HOOKED, wall=T0 + 90)
    await reconciler.reconcile(KEY)
    assert sources.source.orders[-1].remove_hook is True
    assert FINALIZER in cluster.finalizers  # registrations gone, the hook not yet
    sources.source.hook_removed = True
    await reconciler.reconcile(KEY)
    assert FINALIZER not in cluster.finalizers


async def test_a_second_leadership_term_builds_a_reconciler_over_the_same_registry():
    """Each term builds a new reconciler over the process's one Metrics registry: a leader
    that lost its Lease (an API server restart) and won it back crashed registering the
    why-metrics a second time."""
    from gitea_runner_operator.metrics import Metrics

    metrics = Metrics()
    for _ in range(2):
        cluster = FakeCluster()
        reconciler = Reconciler(
            FakeCache(cluster, {**VALID, "maxActiveRunners": 3}),
            cluster,
            FakeSources(snapshot(queued=1)),  # type: ignore[arg-type]
            Expectations(),
            metrics=metrics,
            clock=Clock(),
            wall_clock=lambda: T0 + 30,
        )
        await reconciler.reconcile(KEY)
        assert len(cluster.unsynced) == 1


async def test_a_runner_whose_pod_succeeded_frees_its_slot_before_its_job_is_complete():
    """A busy group at its maximum: the moment a runner's Pod succeeds (the runner exited
    after its job), its replacement is made; waiting for the Job controller's Complete
    condition cost seconds per runner under load (issue 27)."""
    cluster = FakeCluster()
    first, _, _ = make(cluster, snapshot(queued=10))
    await first.reconcile(KEY)
    cluster.sync()
    names = sorted(cluster.jobs)
    for name in names:
        cluster.jobs[name]["metadata"]["annotations"]["gitea.bpg.pw/took-job"] = "true"
    cluster.pods = [runner_pod(names[0], f"{names[0]}-a", phase="Succeeded")]
    cluster.pods += [runner_pod(n, f"{n}-a") for n in names[1:]]
    again, _, _ = make(cluster, snapshot(queued=7))
    await again.reconcile(KEY)
    assert len(cluster.unsynced) == 1  # one slot free: one replacement, not zero, not more
    assert cluster.status is not None and cluster.status["activeRunners"] == 3


class CountingCluster(FakeCluster):
    """Counts annotation writes, and how many are under way at once."""

    def __init__(self) -> None:
        super().__init__()
        self.annotations_written = 0
        self.in_flight = 0
        self.most_in_flight = 0

    async def _write(self) -> None:
        self.annotations_written += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0)
        self.in_flight -= 1

    async def annotate_job(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        await self._write()
        await super().annotate_job(namespace, name, annotations)

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        await self._write()
        await super().annotate_pod(namespace, name, annotations)


async def test_a_wave_of_busy_runners_is_marked_over_short_passes_not_one_long_one():
    """50 runners take their jobs at once: 100 annotation writes (took-job, scale-down
    guard). One pass writing them one by one held the group for seconds, and a runner that
    finished meanwhile waited that long for its replacement (issue 27). Each pass writes a
    bounded few, concurrently, and comes back at once for the rest."""
    cluster = CountingCluster()
    spec = {**VALID, "maxActiveRunners": 50}
    first, _, _ = make(cluster, snapshot(queued=50), spec=spec)
    await first.reconcile(KEY)
    cluster.sync()
    names = sorted(cluster.jobs)
    cluster.pods = [runner_pod(n, f"{n}-a") for n in names]
    busy = tuple(
        ActionRunner(id=i, name=f"{n}-a", status="online", busy=True, ephemeral=True)
        for i, n in enumerate(names)
    )
    reconciler, _, _ = make(cluster, snapshot(queued=0, runners=busy), spec=spec)
    passes = 0
    while True:
        before = cluster.annotations_written
        result = await reconciler.reconcile(KEY)
        passes += 1
        assert cluster.annotations_written - before <= MARKS_PER_PASS
        if result.requeue_after is None:
            break
        assert result.requeue_after <= 0.1 and passes < 10
    assert cluster.annotations_written == 100 and cluster.most_in_flight > 1
    assert all(
        j["metadata"]["annotations"].get("gitea.bpg.pw/took-job") for j in cluster.jobs.values()
    )
    assert all(p["metadata"]["annotations"] for p in cluster.pods)
