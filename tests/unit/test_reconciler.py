"""The reconciler's choreography over in-memory stand-ins for the cache, the API server and
the poll tasks. The real API server and Gitea are exercised by the integration suite; these
pin down what a user relies on between them: restarts and fast watches do not double or
starve runners, bad specs and refused creates become conditions, Gitea failures touch no Job
and erase nothing, reaps are only proposed (the poll task checks them against Gitea), and a
deleted group is torn down in order."""

from __future__ import annotations

from typing import Any

import pytest
import structlog

from gitea_runner_operator.api.gitea import ActionJob, ActionRunner
from gitea_runner_operator.api.hooks import HookStatus
from gitea_runner_operator.api.observation import Observation, Problem, Snapshot
from gitea_runner_operator.kube.cache import Release
from gitea_runner_operator.kube.cluster import CreateRefused
from gitea_runner_operator.reconcile.expectations import Expectations
from gitea_runner_operator.reconcile.ports import ReapOrder
from gitea_runner_operator.reconcile.reconciler import FINALIZER, Reconciler
from gitea_runner_operator.reconcile.scaling import ReapReason
from tests.support import merge_patch
from tests.unit.test_runnergroup import VALID

KEY = "team-a/ci"
CREATED = "2026-01-01T00:00:00Z"
T0 = 1767225600.0  # CREATED as a timestamp


class FakeCluster:
    """Plays the API server. ``watch="lagging"``: created Jobs reach the cache only when
    ``sync`` is called, like a watch that lags behind the create. ``watch="eager"``: the
    watch event is delivered before the create call returns, which real clusters also do."""

    def __init__(self, watch: str = "lagging") -> None:
        self.watch = watch
        self.jobs: dict[str, dict[str, Any]] = {}
        self.pods: list[dict[str, Any]] = []
        self.gone_pods: list[dict[str, Any]] = []
        self.annotations: dict[str, str] = {}
        self.unsynced: list[dict[str, Any]] = []
        self.status: dict[str, Any] | None = None
        self.events: list[tuple[str, str]] = []
        self.deleted: list[str] = []
        self.creates = 0
        self.refuse: str | None = None
        self.lose_answer = False
        self.finalizers: list[str] = [FINALIZER]
        self.deletion: str | None = None

    async def create_job(self, manifest: dict[str, Any]) -> str:
        self.creates += 1
        if self.refuse:
            raise CreateRefused(self.refuse)
        if self.lose_answer:  # the API server created it; the answer never came back
            job = {**manifest, "metadata": {**manifest["metadata"], "creationTimestamp": CREATED}}
            self.unsynced.append(job)
            raise TimeoutError
        name = manifest["metadata"]["name"]
        job = {**manifest, "metadata": {**manifest["metadata"], "creationTimestamp": CREATED}}
        if self.watch == "eager":
            self.jobs[name] = job
        else:
            self.unsynced.append(job)
        return name

    def sync(self) -> None:
        for job in self.unsynced:
            self.jobs[job["metadata"]["name"]] = job
        self.unsynced.clear()

    @property
    def all_created(self) -> int:
        return len(self.jobs) + len(self.unsynced)

    async def delete_job(self, namespace: str, name: str) -> bool:
        self.deleted.append(name)
        return self.jobs.pop(name, None) is not None

    async def annotate_job(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        self.jobs[name]["metadata"].setdefault("annotations", {}).update(annotations)

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        for pod in self.pods:
            if pod["metadata"]["name"] == name:
                pod["metadata"].setdefault("annotations", {}).update(annotations)

    async def patch_group_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.status = merge_patch(self.status, status)

    async def annotate_group(self, namespace: str, name: str, annotations: dict[str, Any]) -> None:
        for k, v in annotations.items():
            if v is None:
                self.annotations.pop(k, None)
            else:
                self.annotations[k] = v

    async def set_finalizers(
        self, namespace: str, name: str, finalizers: list[str], resource_version: str
    ) -> None:
        self.finalizers = finalizers

    async def emit_event(self, group: Any, event_type: str, reason: str, message: str) -> None:
        self.events.append((event_type, reason))


class FakeCache:
    def __init__(self, cluster: FakeCluster, spec: dict[str, Any]) -> None:
        self.cluster = cluster
        self.spec = spec
        self.released: list[Release] = []

    def group(self, key: str) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "name": "ci",
            "namespace": "team-a",
            "uid": "u1",
            "generation": 1,
            "resourceVersion": "7",
            "finalizers": list(self.cluster.finalizers),
            "annotations": dict(self.cluster.annotations),
        }
        if self.cluster.deletion:
            meta["deletionTimestamp"] = self.cluster.deletion
        return {"metadata": meta, "spec": self.spec, "status": self.cluster.status}

    def runner_jobs(self, key: str) -> list[dict[str, Any]]:
        return list(self.cluster.jobs.values())

    def runner_pods(self, key: str) -> list[dict[str, Any]]:
        return self.cluster.pods

    def released_since(self, key: str, since: float) -> list[Release]:
        return [r for r in self.released if r.at > since]

    def deleted_pods(self, key: str) -> list[dict[str, Any]]:
        return self.cluster.gone_pods


class FakeSource:
    def __init__(self, snapshot: Snapshot) -> None:
        self.latest: Snapshot | None = snapshot
        self.woken = 0
        self.orders: list[ReapOrder] = []
        self.hook: HookStatus | None = None
        self.hook_removed = False
        self.kept_hook_id: int | None = None

    def wake(self) -> None:
        self.woken += 1

    def submit(self, order: ReapOrder) -> None:
        self.orders.append(order)


class FakeSources:
    def __init__(self, snapshot: Snapshot) -> None:
        self.source = FakeSource(snapshot)
        self.stopped: list[str] = []

    def get(self, key: str) -> FakeSource:
        return self.source

    async def ensure(self, key: str, spec: Any) -> FakeSource:
        return self.source

    async def stop(self, key: str) -> None:
        self.stopped.append(key)


def snapshot(
    queued: int = 0,
    runners: tuple[ActionRunner, ...] = (),
    problem: Problem | None = None,
    started_at: float = 1.0,
) -> Snapshot:
    jobs = tuple(ActionJob(id=i, labels=("ubuntu-latest",), status="queued") for i in range(queued))
    obs = None if problem else Observation(queued=jobs, runners=runners)
    return Snapshot(
        started_at=started_at, checked_at="2026-01-01T00:00:10Z", observation=obs, problem=problem
    )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(
    cluster: FakeCluster,
    snap: Snapshot,
    spec: dict[str, Any] | None = None,
    wall: float = T0 + 30,
    clock: Clock | None = None,
) -> tuple[Reconciler, FakeSources, FakeCache]:
    sources = FakeSources(snap)
    cache = FakeCache(cluster, spec or {**VALID, "maxActiveRunners": 3})
    reconciler = Reconciler(
        cache,
        cluster,
        sources,  # type: ignore[arg-type]
        Expectations(),
        clock=clock or Clock(),
        wall_clock=lambda: wall,
    )
    return reconciler, sources, cache


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
    first, _, _ = make(cluster, snapshot(queued=1))
    await first.reconcile(KEY)
    cluster.sync()
    (job,) = cluster.jobs.values()
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
    first, _, _ = make(cluster, snapshot(queued=1))
    await first.reconcile(KEY)
    cluster.sync()
    (name,) = cluster.jobs
    cluster.jobs[name]["metadata"]["annotations"]["gitea.bpg.pw/took-job"] = "true"
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
    assert condition(cluster, "RunnersHealthy")["status"] == "True"


def _pod(job: str, name: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"batch.kubernetes.io/job-name": job}},
        "status": {"phase": "Running", **status},
    }


async def test_idle_runners_are_proposed_to_the_poll_task_never_deleted_here():
    cluster = FakeCluster()
    first, _, _ = make(cluster, snapshot(queued=1))
    await first.reconcile(KEY)
    cluster.sync()
    (name,) = cluster.jobs
    pod = f"{name}-bcdfg"
    cluster.pods = [_pod(name, pod)]
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


async def test_runners_idle_while_jobs_wait_hold_creation_back_and_say_why():
    cluster = FakeCluster()
    first, _, _ = make(cluster, snapshot(queued=1))
    await first.reconcile(KEY)
    cluster.sync()
    (name,) = cluster.jobs
    pod = f"{name}-bcdfg"
    cluster.pods = [_pod(name, pod)]
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
    first, _, _ = make(cluster, snapshot(queued=1))
    await first.reconcile(KEY)
    cluster.sync()
    (name,) = cluster.jobs
    waiting = {"waiting": {"reason": "ImagePullBackOff", "message": "pull access denied"}}
    cluster.pods = [
        _pod(
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
    first, _, _ = make(cluster, snapshot(queued=1))
    await first.reconcile(KEY)
    cluster.sync()
    (name,) = cluster.jobs
    pod = f"{name}-bcdfg"
    cluster.pods = [_pod(name, pod)]
    cluster.jobs[name]["metadata"]["annotations"]["gitea.bpg.pw/took-job"] = "true"
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
    cluster.pods = [_pod(busy_job, f"{busy_job}-bcdfg"), _pod(idle_job, f"{idle_job}-bcdfg")]
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


async def test_a_create_whose_answer_was_lost_is_not_made_a_second_time():
    """Under load a create can time out after the API server made the Job. Forgetting it
    would start a second runner for the same job on the next pass (seen at 1,000 groups:
    2,545 runner Jobs for 2,000 queued jobs)."""
    cluster = FakeCluster()
    cluster.lose_answer = True
    reconciler, _, _ = make(cluster, snapshot(queued=1))
    with pytest.raises(TimeoutError):
        await reconciler.reconcile(KEY)
    cluster.lose_answer = False
    await reconciler.reconcile(KEY)  # the watch has not shown the Job yet
    assert cluster.creates == 1 and len(cluster.unsynced) == 1


HOOKED = {
    **VALID,
    "maxActiveRunners": 3,
    "webhook": {"secretRef": {"name": "hook", "key": "secret"}, "manageHook": True},
}


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
