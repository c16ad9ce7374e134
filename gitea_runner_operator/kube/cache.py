"""The operator's view of the cluster: informers for RunnerGroups and for the Jobs and Pods
it owns, in the namespaces it watches, plus a per-group "last changed" clock.

Reconcile reads only this cache, never lists the API, so a pass costs no API calls unless it
acts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

from kubernetes_asyncio import client

from gitea_runner_operator.api import constants
from gitea_runner_operator.kube.informer import Informer, Obj, object_key

GroupKey = str  # "namespace/name"
# (group key, event type, object, object before the event)
Listener = Callable[[GroupKey, str, Obj, Obj | None], None]


def group_key_of_owned(obj: Obj) -> GroupKey | None:
    meta = obj.get("metadata") or {}
    name = (meta.get("labels") or {}).get(constants.GROUP_NAME_LABEL)
    return f"{meta.get('namespace')}/{name}" if name else None


class ClusterCache:
    def __init__(
        self,
        api: client.ApiClient,
        namespaces: Iterable[str] | None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._changed: dict[GroupKey, float] = {}
        self._group_listeners: list[Listener] = []
        self._owned_listeners: list[Listener] = []
        custom = client.CustomObjectsApi(api)
        batch = client.BatchV1Api(api)
        core = client.CoreV1Api(api)
        sel = constants.MANAGED_SELECTOR
        g, v, p = constants.GROUP, constants.VERSION, constants.PLURAL
        self.groups: list[Informer] = []
        self.jobs: list[Informer] = []
        self.pods: list[Informer] = []
        scopes: list[str | None] = [*namespaces] if namespaces else [None]
        for ns in scopes:
            where = ns or "*"
            if ns is None:
                self.groups.append(
                    Informer(f"runnergroups/{where}", custom.list_cluster_custom_object, g, v, p)
                )
                self.jobs.append(
                    Informer(f"jobs/{where}", batch.list_job_for_all_namespaces, label_selector=sel)
                )
                self.pods.append(
                    Informer(f"pods/{where}", core.list_pod_for_all_namespaces, label_selector=sel)
                )
            else:
                self.groups.append(
                    Informer(
                        f"runnergroups/{where}", custom.list_namespaced_custom_object, g, v, ns, p
                    )
                )
                self.jobs.append(
                    Informer(f"jobs/{where}", batch.list_namespaced_job, ns, label_selector=sel)
                )
                self.pods.append(
                    Informer(f"pods/{where}", core.list_namespaced_pod, ns, label_selector=sel)
                )
        for inf in self.groups:
            inf.add_handler(self._on_group)
        for inf in (*self.jobs, *self.pods):
            inf.add_handler(self._on_owned)

    @property
    def informers(self) -> list[Informer]:
        return [*self.groups, *self.jobs, *self.pods]

    def on_group_event(self, listener: Listener) -> None:
        self._group_listeners.append(listener)

    def on_owned_event(self, listener: Listener) -> None:
        self._owned_listeners.append(listener)

    async def wait_synced(self) -> None:
        await asyncio.gather(*(inf.synced.wait() for inf in self.informers))

    # -- reads --------------------------------------------------------------------------------

    def group(self, key: GroupKey) -> Obj | None:
        for inf in self.groups:
            if key in inf.cache:
                return inf.cache[key]
        return None

    def group_keys(self) -> list[GroupKey]:
        return [key for inf in self.groups for key in inf.cache]

    def runner_jobs(self, key: GroupKey) -> list[Obj]:
        return self._owned(self.jobs, key)

    def runner_pods(self, key: GroupKey) -> list[Obj]:
        return self._owned(self.pods, key)

    def changed_at(self, key: GroupKey) -> float:
        """When a Job or Pod of this group last changed (monotonic); 0 if never seen."""
        return self._changed.get(key, 0.0)

    def _owned(self, informers: list[Informer], key: GroupKey) -> list[Obj]:
        return [
            obj for inf in informers for obj in inf.cache.values() if group_key_of_owned(obj) == key
        ]

    # -- events -------------------------------------------------------------------------------

    def _on_group(self, kind: str, obj: Obj, before: Obj | None) -> None:
        key = object_key(obj)
        for listener in self._group_listeners:
            listener(key, kind, obj, before)

    def _on_owned(self, kind: str, obj: Obj, before: Obj | None) -> None:
        key = group_key_of_owned(obj)
        if key is None:
            return
        self._changed[key] = self._clock()
        for listener in self._owned_listeners:
            listener(key, kind, obj, before)


def spec_changed(kind: str, obj: Obj, before: Obj | None) -> bool:
    """Filter for RunnerGroup events: our own status writes must not trigger reconciles."""
    if kind in ("ADDED", "DELETED") or before is None:
        return True
    new_meta, old_meta = obj.get("metadata") or {}, before.get("metadata") or {}
    return (
        new_meta.get("generation") != old_meta.get("generation")
        or new_meta.get("uid") != old_meta.get("uid")
        or bool(new_meta.get("deletionTimestamp")) != bool(old_meta.get("deletionTimestamp"))
    )
