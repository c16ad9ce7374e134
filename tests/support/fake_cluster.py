"""The one in-memory cluster for unit tests: it plays the API server (Jobs, Pods, the group's
status, annotations, finalizers, Events, runner Secrets), the informer cache over it, the poll
tasks' snapshots, and a CoreV1 API for Secret and ConfigMap reads. The reconciler, the reaper,
the loss follow-up and the Forgejo enroller all write to it, so a test of any of them reads
the same records: ``jobs``, ``deleted``, ``events`` (type, reason) and ``messages``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.api.cadence import Cadence
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

    def __init__(self, watch: str = "lagging", journal: list[str] | None = None) -> None:
        self.watch = watch
        # Shared with a fake Gitea, it shows the order of deletions across the two.
        self.journal = journal if journal is not None else []
        self.uid = "u1"
        self.jobs: dict[str, dict[str, Any]] = {}
        self.pods: list[dict[str, Any]] = []
        self.gone_pods: list[dict[str, Any]] = []
        self.annotations: dict[str, str] = {}
        self.unsynced: list[dict[str, Any]] = []
        self.status: dict[str, Any] | None = None
        self.status_writes = 0  # patches of the status subresource
        self.events: list[tuple[str, str]] = []
        self.messages: list[str] = []  # each Event's message, in the order of ``events``
        self.deleted: list[str] = []
        self.creates = 0
        self.refuse: str | None = None
        self.lose_answer = False
        self.drop_creates = 0
        self.finalizers: list[str] = [FINALIZER]
        self.deletion: str | None = None

    async def create_job(self, manifest: dict[str, Any]) -> str:
        self.creates += 1
        if self.refuse:
            raise CreateRefused(self.refuse)
        if self.drop_creates > 0:  # the connection broke before the API server had it
            self.drop_creates -= 1
            raise ConnectionResetError
        name = manifest["metadata"]["name"]
        if name in self.jobs or any(j["metadata"]["name"] == name for j in self.unsynced):
            return str(name)  # AlreadyExists: kube/cluster.py answers it as created
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

    def put_jobs(self, *manifests: dict[str, Any]) -> None:
        """Jobs that already exist, in the API server and in the cache, oldest first."""
        for manifest in manifests:
            self.jobs[manifest["metadata"]["name"]] = manifest

    @property
    def losses(self) -> dict[str, str]:
        return dict((self.status or {}).get("losses") or {})

    async def delete_job(self, namespace: str, name: str) -> bool:
        self.deleted.append(name)
        self.journal.append(f"delete job {name}")
        return self.jobs.pop(name, None) is not None

    async def annotate_job(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        self.jobs[name]["metadata"].setdefault("annotations", {}).update(annotations)

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        for pod in self.pods:
            if pod["metadata"]["name"] == name:
                pod["metadata"].setdefault("annotations", {}).update(annotations)

    async def patch_group_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.status_writes += 1
        self.status = merge_patch(self.status, status)

    async def annotate_group(self, namespace: str, name: str, annotations: dict[str, Any]) -> None:
        self.annotations = merge_patch(self.annotations, annotations)

    async def set_finalizers(
        self, namespace: str, name: str, finalizers: list[str], resource_version: str
    ) -> None:
        self.finalizers = finalizers

    async def emit_event(self, group: Any, event_type: str, reason: str, message: str) -> None:
        self.events.append((event_type, reason))
        self.messages.append(message)


class FakeCredentials:
    """The runner credentials writer the Forgejo enroller uses: Secrets, and resuming a
    suspended runner Job of the cluster."""

    def __init__(self, cluster: FakeCluster, fail: Exception | None = None) -> None:
        self.cluster = cluster
        self.secrets: dict[str, dict[str, Any]] = {}
        self.fail = fail

    async def create_secret(self, manifest: dict[str, Any]) -> None:
        if self.fail is not None:
            raise self.fail
        self.secrets[manifest["metadata"]["name"]] = manifest

    async def resume_job(self, namespace: str, name: str) -> bool:
        self.cluster.jobs[name]["spec"]["suspend"] = False
        return True


class FakeCache:
    """The informer cache over a ``FakeCluster``: what the cluster holds, as a watch saw it."""

    def __init__(self, cluster: FakeCluster, spec: dict[str, Any] | None = None) -> None:
        self.cluster = cluster
        self.spec = spec if spec is not None else VALID
        self.released: list[Release] = []
        self._generation = (0, None)  # (generation, the spec it was given for)

    def group(self, key: str) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "name": "ci",
            "namespace": "team-a",
            "uid": self.cluster.uid,
            "generation": self.generation,
            "resourceVersion": "7",
            "finalizers": list(self.cluster.finalizers),
            "annotations": dict(self.cluster.annotations),
        }
        if self.cluster.deletion:
            meta["deletionTimestamp"] = self.cluster.deletion
        return {"metadata": meta, "spec": self.spec, "status": self.cluster.status}

    @property
    def generation(self) -> int:
        """Moves when a test gives the group another spec, as the API server's does."""
        number, seen = self._generation
        if seen is not self.spec:
            self._generation = number, seen = number + 1, self.spec
        return number

    def group_keys(self) -> list[str]:
        return [KEY]

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
        self.cadence: Cadence | None = None

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
    return fresh_reconciler(cache, cluster, sources, clock, lambda: wall), sources, cache


def fresh_reconciler(
    cache: Any,
    cluster: Any,
    sources: Any,
    clock: Clock | None,
    wall_clock: Callable[[], float],
    expectations: Expectations | None = None,
    **options: Any,
) -> Reconciler:
    """The real Reconciler over fakes, with no expectations yet: what a started (or
    restarted) operator runs. ``expectations``: an empty one the test reads too."""
    clock = clock or Clock()
    expectations = expectations if expectations is not None else Expectations(clock=clock)
    return Reconciler(
        cache, cluster, sources, expectations, clock=clock, wall_clock=wall_clock, **options
    )


async def first_runner(cluster: FakeCluster) -> str:
    """One queued job and one pass: the name of the runner Job it created, once the watch
    delivered it (the unpacking fails the test if the pass created none, or more)."""
    first, _, _ = make(cluster, snapshot(queued=1))
    await first.reconcile(KEY)
    cluster.sync()
    (name,) = cluster.jobs
    return name


def took_job(cluster: FakeCluster, name: str) -> None:
    """The runner of Job ``name`` reported that it took its job (the annotation it writes)."""
    cluster.jobs[name]["metadata"]["annotations"]["gitea.bpg.pw/took-job"] = "true"


def runner_pod(job: str, name: str, **status: Any) -> dict[str, Any]:
    """A running Pod of runner Job ``job``, as the Job controller labels it."""
    return {
        "metadata": {"name": name, "labels": {"batch.kubernetes.io/job-name": job}},
        "status": {"phase": "Running", **status},
    }


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
