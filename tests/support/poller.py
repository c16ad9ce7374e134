"""Fakes for the poll task's reaper: Gitea's runner registrations (which a test can make
busy at a chosen call), a reaper over the one fake cluster, and a reap run."""

from __future__ import annotations

from typing import Any

from gitea_runner_operator.api.gitea import ActionJob, ActionRunner, Listing
from gitea_runner_operator.api.observation import Observation, Snapshot
from gitea_runner_operator.forge.errors import GiteaServerError
from gitea_runner_operator.poll.observer import GiteaHandle
from gitea_runner_operator.poll.reaper import Reaper
from gitea_runner_operator.reconcile.ports import ReapOrder
from gitea_runner_operator.reconcile.scaling import ReapCandidate, ReapReason
from tests.support.fake_cluster import FakeCache, FakeCluster, runner_pod

GROUP = {"metadata": {"name": "ci", "namespace": "team-a", "uid": "u1"}}


class FakeRunnerRegistrations:
    """Runner registrations by id; ``take_job_on`` makes a runner busy at a chosen call."""

    def __init__(self, runners: list[ActionRunner], *, can_disable: bool = True) -> None:
        self.runners = {r.id: r for r in runners}
        self.calls: list[tuple[str, int]] = []
        self.take_job_on: tuple[str, int] | None = None
        self.can_disable = can_disable
        self.log: list[str] = []
        self.in_progress: list[ActionJob] = []  # jobs Gitea lists as running
        self.jobs_fail = False
        self.jobs_complete = True

    def _maybe_take(self, call: str, runner_id: int) -> None:
        if self.take_job_on == (call, runner_id) and runner_id in self.runners:
            r = self.runners[runner_id]
            self.runners[runner_id] = r.model_copy(update={"busy": True})

    async def set_runner_disabled(self, scope: Any, runner_id: int, disabled: bool) -> Any:
        self.calls.append(("disable" if disabled else "enable", runner_id))
        self._maybe_take("disable", runner_id)
        if not self.can_disable:
            return None
        return self.runners.get(runner_id)

    async def list_jobs(self, scope: Any, status: str = "queued", max_pages: Any = None) -> Any:
        assert status == "in_progress"
        self.calls.append(("jobs", 0))
        if self.jobs_fail:
            raise GiteaServerError("Gitea answered 500")
        return Listing(tuple(self.in_progress), self.jobs_complete)

    async def get_runner(self, scope: Any, runner_id: int) -> ActionRunner | None:
        self.calls.append(("get", runner_id))
        return self.runners.get(runner_id)

    async def delete_runner(self, scope: Any, runner_id: int) -> bool:
        self.calls.append(("delete", runner_id))
        self.log.append(f"deregister {runner_id}")
        return self.runners.pop(runner_id, None) is not None


def _reaper(
    gitea: FakeRunnerRegistrations, jobs: list[str], pods: list[str]
) -> tuple[Reaper, FakeCluster]:
    """A reaper over the one fake cluster holding these runner Jobs and their running Pods
    (a Pod's name is its Job's and five letters); the cluster's deletions go to the fake
    Gitea's log, so a test sees the order of the two."""
    cluster = FakeCluster(journal=gitea.log)
    cluster.put_jobs(*({"metadata": {"name": j, "creationTimestamp": None}} for j in jobs))
    cluster.pods = [runner_pod(p[:-6], p) for p in pods]
    return Reaper(cluster, FakeCache(cluster)), cluster  # type: ignore[arg-type]


def _run(
    reaper: Reaper, gitea: FakeRunnerRegistrations, order: ReapOrder, runners: list[ActionRunner]
) -> Any:
    snap = Snapshot(0.0, "x", observation=Observation(queued=(), runners=tuple(runners)))
    handle = GiteaHandle(gitea, None)  # type: ignore[arg-type]
    return reaper.run("team-a/ci", handle, snap, order)


IDLE = ActionRunner(id=7, name="ci-h-jobxx-podxx", ephemeral=True, status="online")
CANDIDATE = ReapCandidate("ci-h-jobxx", ReapReason.IDLE, ("ci-h-jobxx-podxx",), (7,))
