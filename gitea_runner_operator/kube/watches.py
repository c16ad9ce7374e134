"""The operator's watches, as one table: what it watches (RunnerGroups, and the runner
Jobs and Pods it owns), how each is listed (in every namespace, or in one), and how its
objects are slimmed before they are kept. ClusterCache (kube/cache.py) makes an informer of
each row per watched namespace. Under ``--sharding`` each owned row has two: one narrowed by
the API server to the shard buckets the replica holds (its selector changes with them,
kube/narrowed.py), one for objects made before the shard label (``!shard``), and both have
the same gate (``admit``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client

from gitea_runner_operator.api import constants
from gitea_runner_operator.kube.informer import Informer
from gitea_runner_operator.kube.narrowed import UNLABELLED_SELECTOR, shard_selector
from gitea_runner_operator.objects.slim import Obj, slim_group, slim_job, slim_pod


@dataclass(frozen=True, slots=True)
class Apis:
    custom: client.CustomObjectsApi
    batch: client.BatchV1Api
    core: client.CoreV1Api

    @classmethod
    def of(cls, api: client.ApiClient) -> Apis:
        return cls(client.CustomObjectsApi(api), client.BatchV1Api(api), client.CoreV1Api(api))


# How a row is listed: the API call and its positional arguments, in one namespace or, for
# None, in all of them.
Lister = Callable[[Apis, str | None], tuple[Callable[..., Any], tuple[Any, ...]]]


def _groups(apis: Apis, ns: str | None) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    g, v, p = constants.GROUP, constants.VERSION, constants.PLURAL
    if ns is None:
        return apis.custom.list_cluster_custom_object, (g, v, p)
    return apis.custom.list_namespaced_custom_object, (g, v, ns, p)


def _jobs(apis: Apis, ns: str | None) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    if ns is None:
        return apis.batch.list_job_for_all_namespaces, ()
    return apis.batch.list_namespaced_job, (ns,)


def _pods(apis: Apis, ns: str | None) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    if ns is None:
        return apis.core.list_pod_for_all_namespaces, ()
    return apis.core.list_namespaced_pod, (ns,)


@dataclass(frozen=True, slots=True)
class Watch:
    name: str
    lister: Lister
    transform: Callable[[Obj], Obj]
    owned: bool  # the operator's own objects: by its label, and gated under --sharding


WATCHES: tuple[Watch, ...] = (
    Watch("runnergroups", _groups, slim_group, owned=False),
    Watch("jobs", _jobs, slim_job, owned=True),
    Watch("pods", _pods, slim_pod, owned=True),
)


# The name suffix of an owned watch's informers for objects without the shard label.
UNLABELLED = "-unlabelled"


def informers(
    apis: Apis,
    namespaces: Iterable[str] | None,
    admit: Callable[[Obj], bool] | None,
    group_transform: Callable[[Obj], Obj] | None = None,
    sharded: bool = False,
) -> dict[str, list[Informer]]:
    """An informer of each watch per namespace (one for all without ``namespaces``), by
    the watch's name. ``group_transform``: the RunnerGroups' own, under --sharding.
    ``sharded``: the owned ones select no bucket until told (Informer.reselect), and each
    has a second informer, named with :data:`UNLABELLED`, for objects without the label."""
    scopes: list[str | None] = [*namespaces] if namespaces else [None]
    made: dict[str, list[Informer]] = {}
    for watch in WATCHES:
        for ns in scopes:
            list_func, args = watch.lister(apis, ns)
            options: dict[str, Any] = {"transform": watch.transform}
            if watch.name == "runnergroups" and group_transform is not None:
                options["transform"] = group_transform
            if watch.owned:
                selector = shard_selector(()) if sharded else constants.MANAGED_SELECTOR
                options.update(label_selector=selector, admit=admit)
            informer = Informer(f"{watch.name}/{ns or '*'}", list_func, *args, **options)
            made.setdefault(watch.name, []).append(informer)
            if watch.owned and sharded:
                options.update(label_selector=UNLABELLED_SELECTOR)
                name = f"{watch.name}{UNLABELLED}"
                made.setdefault(name, []).append(
                    Informer(f"{name}/{ns or '*'}", list_func, *args, **options)
                )
    return made


def streams(namespaces: int, *, sharded: bool) -> int:
    """How many watch streams :func:`informers` keeps open at once: the watch connection
    pool is sized by it (manager.py), since a stream past the pool's size would wait for a
    connection for as long as another stream lives, and its objects would never arrive."""
    per_scope = len(WATCHES) + (sum(w.owned for w in WATCHES) if sharded else 0)
    return per_scope * max(1, namespaces)
