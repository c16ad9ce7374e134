"""The operator's watches, as one table: what it watches (RunnerGroups, and the runner
Jobs and Pods it owns), how each is listed (in every namespace, or in one), and how its
objects are slimmed before they are kept. ClusterCache (kube/cache.py) makes an informer of
each row per watched namespace, and gives the owned ones the same gate (``admit``) under
``--sharding``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client

from gitea_runner_operator.api import constants
from gitea_runner_operator.kube.informer import Informer
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


def informers(
    apis: Apis,
    namespaces: Iterable[str] | None,
    admit: Callable[[Obj], bool] | None,
    group_transform: Callable[[Obj], Obj] | None = None,
) -> dict[str, list[Informer]]:
    """An informer of each watch per namespace (one for all without ``namespaces``), by
    the watch's name. ``group_transform``: the RunnerGroups' own, under --sharding."""
    scopes: list[str | None] = [*namespaces] if namespaces else [None]
    made: dict[str, list[Informer]] = {}
    for watch in WATCHES:
        for ns in scopes:
            list_func, args = watch.lister(apis, ns)
            options: dict[str, Any] = {"transform": watch.transform}
            if watch.name == "runnergroups" and group_transform is not None:
                options["transform"] = group_transform
            if watch.owned:
                options.update(label_selector=constants.MANAGED_SELECTOR, admit=admit)
            informer = Informer(f"{watch.name}/{ns or '*'}", list_func, *args, **options)
            made.setdefault(watch.name, []).append(informer)
    return made
