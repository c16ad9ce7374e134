"""The one in-memory cluster for unit tests of the reconciler: it plays the API server
(Jobs, Pods, the group's status, annotations, finalizers, Events), the informer cache over
it, the poll tasks' snapshots, and a CoreV1 API for Secret and ConfigMap reads."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.api.gitea import ActionJob, ActionRunner
from gitea_runner_operator.api.hooks import HookStatus
from gitea_runner_operator.api.observation import Observation, Problem, Snapshot
from gitea_runner_operator.kube.cache import Release
from gitea_runner_operator.kube.cluster import CreateRefused
from gitea_runner_operator.reconcile.expectations import Expectations
from gitea_runner_operator.reconcile.ports import ReapOrder
from gitea_runner_operator.reconcile.reconciler import FINALIZER, Reconciler
from tests.support import merge_patch
from tests.support.builders import VALID

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
        self.annotations = merge_patch(self.annotations, annotations)

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
    """A group's poll task as the reconciler sees it: its latest snapshot, wake-ups, reap
    orders and the managed hook it keeps."""

    def __init__(self, snapshot: Snapshot | None = None) -> None:
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
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

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


HOOKED = {
    **VALID,
    "maxActiveRunners": 3,
    "webhook": {"secretRef": {"name": "hook", "key": "secret"}, "manageHook": True},
}


class FakeCore:
    def __init__(self, objects: dict[tuple[str, str], Any], status: int = 404) -> None:
        self.objects = objects
        self.status = status

        self.reads = 0
        self.timeouts: list[Any] = []

    async def read_namespaced_config_map(self, name: str, namespace: str, **kw: Any) -> Any:
        return self._get("ConfigMap", name, **kw)

    async def read_namespaced_secret(self, name: str, namespace: str, **kw: Any) -> Any:
        return self._get("Secret", name, **kw)

    def _get(self, kind: str, name: str, **kw: Any) -> Any:
        self.reads += 1
        self.timeouts.append(kw.get("_request_timeout"))
        if (kind, name) not in self.objects:
            raise ApiException(status=self.status)
        return self.objects[(kind, name)]
