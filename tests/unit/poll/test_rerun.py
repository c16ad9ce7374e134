"""The follow-up of a lost runner in Gitea: find its job, clean up, re-run once Gitea failed it,
never twice for one loss (restart, second replica) and never past spec.retry.onRunnerLoss."""

from __future__ import annotations

from typing import Any

from gitea_runner_operator.api.gitea import ActionJob, ActionRunner, Listing
from gitea_runner_operator.api.loss import LossRecord, LossState, loss_records
from gitea_runner_operator.api.naming import runner_prefix
from gitea_runner_operator.api.observation import Observation, Snapshot
from gitea_runner_operator.api.runnergroup import parse_spec
from gitea_runner_operator.forge.errors import GiteaError, GiteaNotFound
from gitea_runner_operator.metrics import Metrics
from gitea_runner_operator.poll.observer import GiteaHandle
from gitea_runner_operator.poll.rerun import LossFollowUp
from gitea_runner_operator.reconcile.status.parts import PendingLosses
from tests.support import merge_patch
from tests.support.builders import VALID
from tests.support.fake_cluster import FakeCache, FakeCluster

KEY = "team-a/ci"
REPO = "acme/widgets"
JOB_URL = f"http://gitea/api/v1/repos/{REPO}/actions/jobs/"
# The group's own runner Jobs and their Pods (api/naming.py): records of others are ignored.
J1, J2 = runner_prefix("ci", "u1") + "bcdfg", runner_prefix("ci", "u1") + "hjklm"
P1, P2 = J1 + "-npqrs", J2 + "-tvwxz"


class FakeJobsAndReruns:
    """Jobs and runs by id; the re-run endpoint makes a new attempt with a new job id."""

    def __init__(self) -> None:
        self.jobs: dict[int, dict[str, Any]] = {}
        self.runs: dict[int, dict[str, Any]] = {}
        self.in_progress: list[ActionJob] = []
        self.deleted_runners: list[int] = []
        self.reruns: list[int] = []
        self.rerun_status = 201

    def add_job(self, job_id: int, runner: str, rid: int, status: str = "in_progress") -> None:
        self.jobs[job_id] = {
            "id": job_id,
            "run_id": 5,
            "name": "build",
            "status": status,
            "run_attempt": 1,
            "url": JOB_URL + str(job_id),
        }
        self.runs[5] = {"id": 5, "status": status, "run_attempt": 1}
        self.in_progress.append(
            ActionJob(
                id=job_id,
                run_id=5,
                name="build",
                status="in_progress",
                runner_id=rid,
                runner_name=runner,
                url=JOB_URL + str(job_id),
            )
        )

    def fail(self, job_id: int, conclusion: str = "failure") -> None:
        self.jobs[job_id] |= {"status": "completed", "conclusion": conclusion}
        self.runs[5] |= {"status": "completed"}
        self.in_progress = [j for j in self.in_progress if j.id != job_id]

    async def list_jobs(self, scope: Any, status: str, max_pages: Any = None, **_: Any) -> Any:
        return Listing(tuple(self.in_progress) if status == "in_progress" else (), True)

    async def delete_runner(self, scope: Any, runner_id: int) -> bool:
        self.deleted_runners.append(runner_id)
        return True

    async def call(self, method: str, path: str, *_: Any, **__: Any) -> Any:
        parts = path.split("/")
        if method == "GET" and "jobs" in parts:
            job = self.jobs.get(int(parts[-1]))
            if job is None:
                raise GiteaNotFound("404")
            return job
        if method == "GET" and "runs" in parts:
            return self.runs[int(parts[-1])]
        if method == "POST" and path.endswith("/rerun"):
            if self.rerun_status == 404:
                raise GiteaNotFound("404")
            if self.rerun_status != 201:
                raise GiteaError(f"POST {path}: unexpected HTTP {self.rerun_status}")
            old = int(parts[-2])
            self.reruns.append(old)
            new = max(self.jobs) + 1
            attempt = self.runs[5]["run_attempt"] + 1
            self.jobs[new] = {
                **self.jobs[old],
                "id": new,
                "status": "queued",
                "run_attempt": attempt,
                "conclusion": "",
            }
            self.runs[5] |= {"status": "queued", "run_attempt": attempt}
            return self.jobs[new]
        raise AssertionError(path)


def setup(
    spec: dict[str, Any] | None = None,
) -> tuple[FakeJobsAndReruns, FakeCluster, Any, Metrics]:
    gitea, cluster, metrics = FakeJobsAndReruns(), FakeCluster(), Metrics()
    cache = FakeCache(cluster, spec)
    return gitea, cluster, cache, metrics


def snap(*runners: ActionRunner) -> Snapshot:
    return Snapshot(0.0, "t", observation=Observation(queued=(), runners=runners))


def lose(cluster: FakeCluster, runner_job: str, pod: str, cause: str = "OOMKilled") -> None:
    losses = {runner_job: LossRecord(pod, cause, 1000.0).encode()}
    cluster.status = merge_patch(cluster.status, {"losses": losses})


async def step(gitea, cluster, cache, metrics, spec=None, *runners, now=1040.0) -> None:
    """One follow-up by a process that starts afresh; what it notes is written by the pass it
    queues, which wakes the poll task for one more follow-up (reconcile/reconciler.py)."""
    notes, queued = PendingLosses(), []
    follow = LossFollowUp(cluster, cache, notes, queued.append, metrics, wall=lambda: now)
    handle = GiteaHandle(gitea, None)  # type: ignore[arg-type]
    await follow.run(KEY, parse_spec(spec or VALID), handle, snap(*runners))
    if not queued:
        return
    assert set(queued) == {KEY}
    part = notes.part(KEY, cache.group(KEY))
    cluster.status = merge_patch(cluster.status, dict(part.fields))
    await follow.run(KEY, parse_spec(spec or VALID), handle, snap(*runners))


async def lost_and_failed(
    gitea: FakeJobsAndReruns,
    cluster: FakeCluster,
    cache: FakeCache,
    metrics: Metrics,
    spec: dict[str, Any] | None = None,
) -> None:
    """Job 10 runs on P1, whose runner Job J1 is lost; a pass follows it up, Gitea fails
    the job, and another pass follows it up."""
    gitea.add_job(10, P1, rid=7)
    lose(cluster, J1, P1)
    await step(gitea, cluster, cache, metrics, spec)
    gitea.fail(10)
    await step(gitea, cluster, cache, metrics, spec)


def record(cluster: FakeCluster, runner_job: str) -> LossRecord:
    return loss_records({"metadata": {"name": "ci", "uid": "u1"}, "status": cluster.status})[
        runner_job
    ]


def rerun_count(metrics: Metrics) -> float:
    value = metrics.registry.get_sample_value(
        "gitea_runner_operator_jobs_rerun_total",
        {"namespace": "team-a", "runnergroup": "ci", "reason": "OOMKilled"},
    )
    return value or 0.0


async def test_a_lost_runners_job_is_found_cleaned_up_and_rerun_once_gitea_failed_it():
    gitea, cluster, cache, metrics = setup()
    gitea.add_job(10, P1, rid=7)
    lose(cluster, J1, P1)

    await step(gitea, cluster, cache, metrics, None, ActionRunner(id=7, name=P1))
    held = record(cluster, J1)
    assert (held.state, held.repo, held.run_id, held.job_id, held.runner_id) == (
        LossState.HELD,
        REPO,
        5,
        10,
        7,
    )
    # gone for good: its registration and its runner Job go at once
    assert gitea.deleted_runners == [7] and cluster.deleted == [J1]

    await step(gitea, cluster, cache, metrics)  # Gitea still counts the job running
    assert record(cluster, J1).state is LossState.HELD and gitea.reruns == []

    gitea.fail(10)  # the zombie-task cron failed it
    await step(gitea, cluster, cache, metrics)
    done = record(cluster, J1)
    assert (done.state, done.reruns, done.rerun_job_id) == (LossState.RERUN, 1, 11)
    assert gitea.reruns == [10]
    assert cluster.events == [("Normal", "JobRerun")]
    (message,) = cluster.messages
    assert P1 in message and "OOMKilled" in message and "'build'" in message
    assert rerun_count(metrics) == 1

    # a restart, or the other replica: the same record, nothing done twice
    await step(gitea, cluster, cache, Metrics())
    assert gitea.reruns == [10] and len(cluster.events) == 1


async def test_the_rerun_lost_again_is_not_rerun_past_the_limit():
    gitea, cluster, cache, metrics = setup()
    await lost_and_failed(gitea, cluster, cache, metrics)
    assert gitea.reruns == [10]
    # job 11 (the re-run) runs on another runner, which is lost too
    gitea.in_progress.append(
        ActionJob(
            id=11,
            run_id=5,
            name="build",
            status="in_progress",
            runner_id=8,
            runner_name=P2,
            url=JOB_URL + "11",
        )
    )
    gitea.jobs[11]["status"] = "in_progress"
    lose(cluster, J2, P2)
    await step(gitea, cluster, cache, metrics)
    gitea.fail(11)
    await step(gitea, cluster, cache, metrics)
    assert record(cluster, J2).state is LossState.LIMIT
    assert gitea.reruns == [10]
    assert cluster.events[-1] == ("Warning", "JobNotRerun")


async def test_a_job_that_succeeded_after_all_is_left_alone():
    gitea, cluster, cache, metrics = setup()
    gitea.add_job(10, P1, rid=7)
    lose(cluster, J1, P1, "EvictionByEvictionAPI")
    await step(gitea, cluster, cache, metrics)
    gitea.fail(10, conclusion="success")  # it finished within its grace period
    await step(gitea, cluster, cache, metrics)
    assert record(cluster, J1).state is LossState.NOT_NEEDED and gitea.reruns == []


async def test_zero_turns_it_off_and_old_gitea_says_unsupported():
    gitea, cluster, cache, metrics = setup()
    off = {**VALID, "retry": {"onRunnerLoss": 0}}
    await lost_and_failed(gitea, cluster, cache, metrics, off)
    assert record(cluster, J1).state is LossState.DISABLED and gitea.reruns == []

    gitea2, cluster2, cache2, metrics2 = setup()
    gitea2.rerun_status = 404  # Gitea 1.25/1.26: no such route
    await lost_and_failed(gitea2, cluster2, cache2, metrics2)
    assert record(cluster2, J1).state is LossState.UNSUPPORTED
    assert "1.27" in cluster2.messages[-1]


async def test_a_crash_after_the_rerun_call_never_reruns_twice():
    gitea, cluster, cache, metrics = setup()
    gitea.add_job(10, P1, rid=7)
    lose(cluster, J1, P1)
    await step(gitea, cluster, cache, metrics)
    gitea.fail(10)
    saved = dict(cluster.status)  # the record as it was before the re-run
    await step(gitea, cluster, cache, metrics)
    assert gitea.reruns == [10]
    cluster.status = saved  # the write after the POST never happened
    gitea.fail(11, conclusion="success")  # and the re-run finished meanwhile
    await step(gitea, cluster, cache, metrics)
    assert gitea.reruns == [10]
    assert record(cluster, J1).state is LossState.NOT_NEEDED


async def test_a_runner_that_held_no_job_is_settled_and_kept_no_registration_alive():
    gitea, cluster, cache, metrics = setup()
    lose(cluster, J1, P1, "EvictionByEvictionAPI")
    await step(gitea, cluster, cache, metrics)
    assert record(cluster, J1).state is LossState.NO_JOB
    assert cluster.deleted == [] and gitea.reruns == []


async def test_a_405_is_an_old_gitea_and_a_400_a_refusal():
    for status, state in ((405, LossState.UNSUPPORTED), (400, LossState.REFUSED)):
        gitea, cluster, cache, metrics = setup()
        gitea.rerun_status = status
        await lost_and_failed(gitea, cluster, cache, metrics)
        assert record(cluster, J1).state is state
        assert cluster.events[-1] == ("Warning", "JobNotRerun")


# -- what a group's users can write never reaches past the group ------------------------------

FOREIGN_JOB, FOREIGN_POD = "other-team-runner-x1", "other-team-runner-x1-abcde"


async def test_a_forged_annotation_deletes_nothing_and_reruns_nothing():
    """One ``kubectl annotate`` used to delete another team's busy runner registration, re-run
    its job in its repository and delete an unrelated Job of the namespace."""
    gitea, cluster, cache, metrics = setup()
    gitea.add_job(10, FOREIGN_POD, rid=7)  # another team's busy runner on a shared scope
    prefix = "runner-loss.gitea.bpg.pw/"
    cluster.annotations = {
        prefix + FOREIGN_JOB: LossRecord(FOREIGN_POD, "OOMKilled", 1000.0).encode(),
        prefix + J1: LossRecord(
            P1, "OOMKilled", 1000.0, LossState.HELD, "other/secret", 5, 10, "build", 7
        ).encode(),
    }
    await step(gitea, cluster, cache, metrics)
    gitea.fail(10)
    await step(gitea, cluster, cache, metrics)
    assert gitea.deleted_runners == [] and cluster.deleted == [] and gitea.reruns == []


async def test_a_record_naming_a_foreign_runner_or_job_is_ignored_and_removed():
    gitea, cluster, cache, metrics = setup()
    gitea.add_job(10, FOREIGN_POD, rid=7)
    lose(cluster, FOREIGN_JOB, FOREIGN_POD)  # not this group's runner Job
    lose(cluster, J1, FOREIGN_POD)  # this group's Job, another's Pod
    await step(gitea, cluster, cache, metrics)
    assert gitea.deleted_runners == [] and cluster.deleted == [] and gitea.reruns == []
    assert cluster.losses == {}


async def test_a_repository_that_is_not_owner_slash_name_is_never_called():
    gitea, cluster, cache, metrics = setup()
    held = LossRecord(P1, "OOMKilled", 1000.0, LossState.HELD, "acme/../../admin", 5, 10, "b")
    cluster.status = {"losses": {J1: held.encode()}}
    await step(gitea, cluster, cache, metrics)
    assert record(cluster, J1).state is LossState.NO_JOB and gitea.reruns == []


async def test_records_beyond_the_bound_are_removed_open_ones_first_kept():
    gitea, cluster, cache, metrics = setup()
    prefix = runner_prefix("ci", "u1")
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    names = [
        prefix + "".join(alphabet[(i // len(alphabet) ** k) % len(alphabet)] for k in range(5))
        for i in range(2500)
    ]
    cluster.status = {
        "losses": {
            n: LossRecord(
                n + "-bcdfg", "Deleted", 1000.0 + i, LossState.NO_JOB, settled_at=1.0
            ).encode()
            for i, n in enumerate(names)
        }
    }
    await step(gitea, cluster, cache, metrics)
    assert len(cluster.losses) <= 100


async def test_a_lost_runner_is_retired_only_once_the_cluster_shows_the_job_it_held():
    """Removing the registration and the runner Job destroys the evidence of the loss: a
    restart before the pass wrote what the follow-up found must find the loss again."""
    gitea, cluster, cache, metrics = setup()
    gitea.add_job(10, P1, rid=7)
    lose(cluster, J1, P1)
    notes, queued = PendingLosses(), []
    follow = LossFollowUp(cluster, cache, notes, queued.append, metrics, wall=lambda: 1040)
    handle = GiteaHandle(gitea, None)  # type: ignore[arg-type]
    await follow.run(KEY, parse_spec(VALID), handle, snap())
    await follow.run(KEY, parse_spec(VALID), handle, snap())  # no pass has written it yet
    assert queued and set(queued) == {KEY}
    assert loss_records(cache.group(KEY))[J1].state is LossState.LOST
    assert gitea.deleted_runners == [] and cluster.deleted == []

    cluster.status = merge_patch(cluster.status, dict(notes.part(KEY, cache.group(KEY)).fields))
    await follow.run(KEY, parse_spec(VALID), handle, snap())
    assert loss_records(cache.group(KEY))[J1].state is LossState.HELD
    assert gitea.deleted_runners == [7] and cluster.deleted == [J1]
    assert notes.part(KEY, cache.group(KEY)).fields == {}  # written: nothing left to write
