"""Several RunnerGroups reconciled by one real Reconciler and Ledger over an in-memory
cluster, the way groups that share jobs (a family, reconcile/capacity/ledger.py) meet in production.

Created Jobs reach the cache at once; each group's Gitea answer is whatever the test sets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gitea_runner_operator.api import constants
from gitea_runner_operator.api.gitea import ActionJob, ActionRunner
from gitea_runner_operator.api.observation import Observation, Problem, Snapshot
from gitea_runner_operator.kube.cache import Release
from gitea_runner_operator.kube.cluster import CreateRefused
from gitea_runner_operator.reconcile.capacity.ledger import Ledger
from gitea_runner_operator.reconcile.reconciler import FINALIZER, Reconciler
from tests.support import merge_patch
from tests.support.fake_cluster import CREATED, T0, Clock, FakeSource, fresh_reconciler

URL = "https://gitea.example.com"
LABEL = "linux"


def group_spec(
    scope: str, org: str | None = None, repo: str | None = None, **extra: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "scope": scope,
        "gitea": {"url": URL},
        "labels": [f"{LABEL}:docker://node:20-bookworm"],
        "maxActiveRunners": 5,
        "registrationToken": {"secretRef": {"name": "runner-secrets", "key": "registration"}},
        "authToken": {"secretRef": {"name": "runner-secrets", "key": "api"}},
    }
    if org is not None:
        spec["org"] = org
    if repo is not None:
        spec["repo"] = repo
    return {**spec, **extra}


def answer(
    jobs: tuple[ActionJob, ...] = (),
    runners: tuple[ActionRunner, ...] = (),
    *,
    started_at: float = 1.0,
    problem: Problem | None = None,
) -> Snapshot:
    obs = None if problem else Observation(queued=jobs, runners=runners)
    return Snapshot(started_at=started_at, checked_at=CREATED, observation=obs, problem=problem)


class Sources:
    def __init__(self) -> None:
        self.by_key: dict[str, FakeSource] = {}
        self.stopped: list[str] = []

    def get(self, key: str) -> FakeSource:
        return self.by_key.setdefault(key, FakeSource())

    async def ensure(self, key: str, spec: Any) -> FakeSource:
        return self.get(key)

    async def stop(self, key: str) -> None:
        self.stopped.append(key)


@dataclass
class Group:
    namespace: str
    name: str
    spec: dict[str, Any]
    annotations: dict[str, str] = field(default_factory=dict)
    status: dict[str, Any] | None = None
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)
    refuse: str | None = None
    released: list[Release] = field(default_factory=list)  # the cache's record of finishes
    # (generation, the spec it was given for): moves when a test gives another spec.
    seen_spec: tuple[int, Any] = (0, None)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def uid(self) -> str:
        return f"uid-{self.namespace}-{self.name}"

    @property
    def generation(self) -> int:
        number, seen = self.seen_spec
        if seen is not self.spec:
            self.seen_spec = number, seen = number + 1, self.spec
        return number

    def obj(self) -> dict[str, Any]:
        meta = {
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid,
            "generation": self.generation,
            "resourceVersion": "1",
            "finalizers": [FINALIZER],
            "annotations": dict(self.annotations),
        }
        return {"metadata": meta, "spec": self.spec, "status": self.status}


class World:
    """The API server and the informer cache of every group at once."""

    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}
        self.events: list[tuple[str, str, str]] = []
        self.deleted: list[str] = []

    def add(self, namespace: str, name: str, spec: dict[str, Any]) -> Group:
        group = Group(namespace, name, spec)
        self.groups[group.key] = group
        return group

    def created(self, key: str) -> int:
        return len(self.groups[key].jobs)

    # -- reads (ClusterReads) -----------------------------------------------------------------

    def group(self, key: str) -> dict[str, Any] | None:
        group = self.groups.get(key)
        return group.obj() if group is not None else None

    def runner_jobs(self, key: str) -> list[dict[str, Any]]:
        return list(self.groups[key].jobs.values())

    def runner_pods(self, key: str) -> list[dict[str, Any]]:
        return list(self.groups[key].pods)

    def released_since(self, key: str, since: float) -> list[Release]:
        return [r for r in self.groups[key].released if r.at > since]

    def finish(self, key: str, job_name: str, at: float) -> None:
        """The runner Job completed, as the watch shows it ``at`` (monotonic)."""
        job = self.groups[key].jobs[job_name]
        job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
        took = (job["metadata"].get("annotations") or {}).get(constants.TOOK_JOB_ANNOTATION)
        self.groups[key].released.append(Release(at, job_name, took == "true"))

    def deleted_pods(self, key: str) -> list[dict[str, Any]]:
        return []

    # -- writes (ClusterWrites) ---------------------------------------------------------------

    def _owner(self, namespace: str, name: str) -> Group:
        return self.groups[f"{namespace}/{name}"]

    async def create_job(self, manifest: dict[str, Any]) -> str:
        meta = manifest["metadata"]
        group = self._owner(meta["namespace"], meta["labels"][constants.GROUP_NAME_LABEL])
        if group.refuse:
            raise CreateRefused(group.refuse)
        job = {"metadata": {**meta, "creationTimestamp": CREATED}, "status": {}}
        group.jobs[meta["name"]] = job
        return str(meta["name"])

    async def delete_job(self, namespace: str, name: str) -> bool:
        self.deleted.append(name)
        for group in self.groups.values():
            if group.namespace == namespace and group.jobs.pop(name, None) is not None:
                return True
        return False

    async def annotate_job(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        for group in self.groups.values():
            if group.namespace == namespace and name in group.jobs:
                group.jobs[name]["metadata"].setdefault("annotations", {}).update(annotations)

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        return None

    async def patch_group_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        group = self._owner(namespace, name)
        group.status = merge_patch(group.status, status)

    async def annotate_group(
        self, namespace: str, name: str, annotations: dict[str, str | None]
    ) -> None:
        group = self._owner(namespace, name)
        group.annotations = merge_patch(group.annotations, annotations)

    async def set_finalizers(
        self, namespace: str, name: str, finalizers: list[str], resource_version: str
    ) -> None:
        return None

    async def emit_event(self, group: Any, event_type: str, reason: str, message: str) -> None:
        self.events.append((group["metadata"]["name"], event_type, reason))


def reconciler(
    world: World,
    *,
    ledger: Ledger | None = None,
    clock: Clock | None = None,
    wall: Clock | None = None,
    **options: Any,
) -> tuple[Reconciler, Sources, Ledger]:
    sources = Sources()
    ledger = ledger if ledger is not None else Ledger(min_interval=0.0, clock=clock or Clock())
    rec = fresh_reconciler(world, world, sources, clock, wall or Clock(T0 + 30), ledger=ledger,
                           **options)  # fmt: skip
    return rec, sources, ledger
