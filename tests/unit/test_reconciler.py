"""The reconciler's I/O choreography over in-memory stand-ins for the cache, the API server
and the pollers. The real API server and Gitea are exercised by the integration suite; these
pin down the behaviour a user relies on between them: restarts do not double runners, bad
specs become conditions, Gitea failures do not touch Jobs."""

from __future__ import annotations

import itertools
from typing import Any

from gitea_runner_operator.forge.models import ActionJob, ActionRunner
from gitea_runner_operator.reconcile.reconciler import Reconciler
from gitea_runner_operator.reconcile.scaling import Observation
from gitea_runner_operator.reconcile.status import Problem
from gitea_runner_operator.runtime.expectations import Expectations
from gitea_runner_operator.runtime.observer import Snapshot
from tests.unit.test_runnergroup import VALID

KEY = "team-a/ci"
_names = itertools.count()


class FakeCluster:
    """Plays the API server: created Jobs appear in the cache only when ``sync`` is called,
    like a watch that lags behind the create."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.unsynced: list[dict[str, Any]] = []
        self.status: dict[str, Any] | None = None
        self.events: list[tuple[str, str]] = []
        self.deleted: list[str] = []

    async def create_job(self, manifest: dict[str, Any]) -> str:
        name = f"ci-{next(_names):05d}"
        job = {
            **manifest,
            "metadata": {
                **manifest["metadata"],
                "name": name,
                "creationTimestamp": "2026-01-01T00:00:00Z",
            },
        }
        self.unsynced.append(job)
        return name

    def sync(self) -> None:
        for job in self.unsynced:
            self.jobs[job["metadata"]["name"]] = job
        self.unsynced.clear()

    async def delete_job(self, namespace: str, name: str) -> bool:
        self.deleted.append(name)
        return self.jobs.pop(name, None) is not None

    async def annotate_job(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        self.jobs[name]["metadata"].setdefault("annotations", {}).update(annotations)

    async def patch_group_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.status = status

    async def emit_event(self, group: Any, event_type: str, reason: str, message: str) -> None:
        self.events.append((event_type, reason))


class FakeCache:
    def __init__(self, cluster: FakeCluster, spec: dict[str, Any]) -> None:
        self.cluster = cluster
        self.spec = spec

    def group(self, key: str) -> dict[str, Any]:
        return {
            "metadata": {"name": "ci", "namespace": "team-a", "uid": "u1", "generation": 1},
            "spec": self.spec,
            "status": self.cluster.status,
        }

    def runner_jobs(self, key: str) -> list[dict[str, Any]]:
        return list(self.cluster.jobs.values())

    def runner_pods(self, key: str) -> list[dict[str, Any]]:
        return []

    def changed_at(self, key: str) -> float:
        return 0.0


class FakePoller:
    def __init__(self, snapshot: Snapshot) -> None:
        self.latest = snapshot

    async def refresh(self, newer_than: float = 0.0) -> Snapshot:
        return self.latest


class FakePollers:
    def __init__(self, snapshot: Snapshot) -> None:
        self.poller = FakePoller(snapshot)
        self.stopped: list[str] = []

    async def ensure(self, key: str, spec: Any) -> FakePoller:
        return self.poller

    async def stop(self, key: str) -> None:
        self.stopped.append(key)


def snapshot(
    queued: int = 0, runners: tuple[ActionRunner, ...] = (), problem: Problem | None = None
) -> Snapshot:
    jobs = tuple(ActionJob(id=i, labels=("ubuntu-latest",), status="queued") for i in range(queued))
    obs = None if problem else Observation(queued=jobs, runners=runners)
    return Snapshot(
        started_at=1.0, checked_at="2026-01-01T00:00:10Z", observation=obs, problem=problem
    )


def make(
    cluster: FakeCluster, snap: Snapshot, spec: dict[str, Any] | None = None
) -> tuple[Reconciler, FakePollers]:
    pollers = FakePollers(snap)
    reconciler = Reconciler(
        FakeCache(cluster, spec or {**VALID, "maxActiveRunners": 3}),  # type: ignore[arg-type]
        cluster,  # type: ignore[arg-type]
        pollers,  # type: ignore[arg-type]
        Expectations(),
        clock=lambda: 100.0,
        wall_clock=lambda: 1767225600.0 + 30,  # 30 s after the Jobs' creationTimestamp
    )
    return reconciler, pollers


async def test_creates_up_to_the_maximum_and_reports_status():
    cluster = FakeCluster()
    reconciler, _ = make(cluster, snapshot(queued=5))
    await reconciler.reconcile(KEY)
    assert len(cluster.unsynced) == 3
    assert cluster.status is not None
    assert cluster.status["activeRunners"] == 3
    assert cluster.status["queuedJobs"] == 5
    assert cluster.status["target"] == "acme/widgets"
    assert cluster.status["conditions"][0]["reason"] == "AtCapacity"
    assert ("Normal", "RunnersCreated") in cluster.events
    healthy = cluster.status["conditions"][1]
    assert (healthy["type"], healthy["status"]) == ("RunnersHealthy", "True")


async def test_failed_runner_jobs_turn_runners_healthy_false_and_warn_once():
    cluster = FakeCluster()
    first, _ = make(cluster, snapshot(queued=1))
    await first.reconcile(KEY)
    cluster.sync()
    (job,) = cluster.jobs.values()
    job["status"] = {"conditions": [{"type": "Failed", "status": "True"}]}
    again, _ = make(cluster, snapshot(queued=1))
    for _ in range(2):
        await again.reconcile(KEY)
    healthy = cluster.status["conditions"][1]
    assert (healthy["status"], healthy["reason"]) == ("False", "RunnerJobsFailed")
    assert cluster.events.count(("Warning", "RunnerJobsFailed")) == 1
    assert len(cluster.unsynced) == 1  # the job is still queued: a new runner is started


async def test_a_second_pass_before_the_watch_catches_up_creates_nothing():
    cluster = FakeCluster()
    reconciler, _ = make(cluster, snapshot(queued=2))
    await reconciler.reconcile(KEY)
    await reconciler.reconcile(KEY)  # the watch has not delivered the two Jobs yet
    assert len(cluster.unsynced) == 2


async def test_a_restarted_operator_counts_the_jobs_in_the_cluster():
    cluster = FakeCluster()
    first, _ = make(cluster, snapshot(queued=2))
    await first.reconcile(KEY)
    cluster.sync()
    restarted, _ = make(cluster, snapshot(queued=2))  # fresh memory, same cluster
    await restarted.reconcile(KEY)
    assert len(cluster.jobs) == 2 and not cluster.unsynced


async def test_a_runner_marked_as_having_taken_its_job_no_longer_covers_demand():
    cluster = FakeCluster()
    first, _ = make(cluster, snapshot(queued=1))
    await first.reconcile(KEY)
    cluster.sync()
    (name,) = cluster.jobs
    # Gitea now shows the Job's Pod busy; without Pods in the fake cache we name the Pod.
    cluster.jobs[name]["metadata"]["annotations"]["gitea.bpg.pw/took-job"] = "true"
    again, _ = make(cluster, snapshot(queued=1))
    await again.reconcile(KEY)
    assert len(cluster.unsynced) == 1  # the busy one no longer covers the new job


async def test_invalid_spec_becomes_a_condition_and_stops_polling():
    cluster = FakeCluster()
    reconciler, pollers = make(cluster, snapshot(queued=3), spec={**VALID, "maxActiveRunners": 0})
    await reconciler.reconcile(KEY)
    assert not cluster.unsynced
    cond = cluster.status["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("False", "InvalidSpec")
    assert "spec.maxActiveRunners" in cond["message"]
    assert pollers.stopped == [KEY]
    assert ("Warning", "InvalidSpec") in cluster.events


async def test_gitea_failure_changes_no_jobs_and_says_why():
    cluster = FakeCluster()
    reconciler, _ = make(
        cluster, snapshot(problem=Problem("GiteaUnauthorized", "401: the auth token was rejected"))
    )
    await reconciler.reconcile(KEY)
    assert not cluster.unsynced and not cluster.deleted
    cond = cluster.status["conditions"][0]
    assert (cond["status"], cond["reason"]) == ("False", "GiteaUnauthorized")
