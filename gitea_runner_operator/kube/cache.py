"""The operator's view of the cluster: informers for RunnerGroups and for the Jobs and Pods
it owns, in the namespaces it watches (the table of watches: kube/watches.py), indexed by
group, plus a per-group "last changed" clock and, under ``--sharding``, the share of Jobs
and Pods this replica keeps.

Reconcile reads only this cache, never lists the API, so a pass costs no API calls unless it
acts.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client

from gitea_runner_operator.api import constants
from gitea_runner_operator.kube import watches
from gitea_runner_operator.kube.informer import Informer, object_key
from gitea_runner_operator.kube.narrowed import (
    OwnedShare,
    _items,
    group_key_of_owned,
    side_by_side,
)
from gitea_runner_operator.objects.slim import Obj, slim_group, slim_unserved_group
from gitea_runner_operator.objects.views import job_finished, runner_exited

GroupKey = str  # "namespace/name"
# Releases kept per group: far more than finish between two Gitea answers.
MAX_RELEASES = 2048


@dataclass(frozen=True, slots=True)
class Release:
    """A runner Job stopped holding a slot (finished, deleted or being deleted) at ``at``
    (monotonic). ``took_job``: it was annotated as having taken its job before."""

    at: float
    job_name: str
    took_job: bool


# Deleted runner Pods kept (last state) so a reconcile that runs after the deletion can
# still read why it happened (objects/disruption.py); per group, for this long, at most this many.
# Expired ones are dropped, not only hidden: memory follows the Pods deleted lately.
DELETED_POD_MEMORY = 600.0
DELETED_PODS_PER_GROUP = 50
# (group key, event type, object, object before the event)
Listener = Callable[[GroupKey, str, Obj, Obj | None], None]


__all__ = ["ClusterCache", "Release", "frees_slot", "group_key_of_owned", "spec_changed"]


class ClusterCache:
    def __init__(
        self,
        api: client.ApiClient,
        namespaces: Iterable[str] | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        shared: bool = False,
    ) -> None:
        self._clock = clock
        self._changed: dict[GroupKey, float] = {}
        self._released: dict[GroupKey, deque[Release]] = {}
        # Jobs released when their runner Pod succeeded (views.runner_exited): their Job's
        # own Complete event later is the same release, not a second one.
        self._exited: dict[GroupKey, set[str]] = {}
        self._group_listeners: list[Listener] = []
        # Moves with every RunnerGroup event: what is derived from the groups alone (the
        # webhook's routing descriptors) stays valid while it stands.
        self.group_changes = 0
        self._owned_listeners: list[Listener] = []
        # group key -> object name -> object: reconciles look up a group's Jobs and Pods by
        # index, not by scanning every object the operator owns.
        self._index_jobs: dict[GroupKey, dict[str, Obj]] = {}
        self._index_pods: dict[GroupKey, dict[str, Obj]] = {}
        self._deleted_pods: dict[GroupKey, dict[str, tuple[float, Obj]]] = {}
        self._deleted_swept = clock()
        apis = watches.Apis.of(api)
        self._namespaced = bool(namespaces)  # an informer per namespace, not one for all
        self._custom = apis.custom  # a taken group is read whole again (serve)
        # --sharding (``shared``): the groups this replica serves, and the shard buckets its
        # Job and Pod watches select (kube/narrowed.py); Jobs and Pods of any other group
        # are not sent, or dropped as they come in (:meth:`serve`, :meth:`unserve`).
        self._share: OwnedShare | None = None
        # --sharding: a group served elsewhere is kept slim (objects/slim.py).
        slim = self._slim_group if shared else None
        admit = self._admits if shared else None
        made = watches.informers(apis, namespaces, admit, slim, sharded=shared)
        self.groups: list[Informer] = made["runnergroups"]
        self.jobs: list[Informer] = made["jobs"]  # narrowed by bucket under --sharding
        self.pods: list[Informer] = made["pods"]
        unlabelled = {r: made.get(f"{r}{watches.UNLABELLED}", []) for r in ("jobs", "pods")}
        if shared:
            narrowed = {"jobs": self.jobs, "pods": self.pods}
            listers: dict[str, Callable[..., Any]] = {"jobs": apis.batch.list_namespaced_job}
            listers["pods"] = apis.core.list_namespaced_pod
            self._share = OwnedShare(narrowed, unlabelled, listers)
        self._by_resource = {"jobs": [*self.jobs, *unlabelled["jobs"]]}
        self._by_resource["pods"] = [*self.pods, *unlabelled["pods"]]
        for inf in self.groups:
            inf.add_handler(self._on_group)
        for inf in self._by_resource["jobs"]:
            inf.add_handler(self._on_job)
        for inf in self._by_resource["pods"]:
            inf.add_handler(self._on_pod)

    @property
    def informers(self) -> list[Informer]:
        return [*self.groups, *self._by_resource["jobs"], *self._by_resource["pods"]]

    def owned_informers(self, resource: str) -> list[Informer]:
        """Every informer of runner ``jobs`` or ``pods``: under --sharding, the narrowed
        ones and those of objects without the shard label."""
        return list(self._by_resource[resource])

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

    def received(self, resource: str) -> int:
        """Watch events received for ``resource`` (runnergroups, jobs, pods), kept or not."""
        made = {"runnergroups": self.groups, **self._by_resource}
        return sum(inf.received for inf in made[resource])

    def group_keys(self) -> list[GroupKey]:
        return [key for inf in self.groups for key in inf.cache]

    def group_objects(self) -> list[Obj]:
        """The groups' objects now, safe to ask from another thread (the webhook receiver's,
        runtime/receiver_thread.py): each informer's objects are copied by one call into C,
        which no other thread interleaves, and a stored object is never changed after (an
        event stores a new one)."""
        return [obj for inf in self.groups for obj in list(inf.cache.values())]

    def runner_jobs(self, key: GroupKey) -> list[Obj]:
        return self._owned(self.jobs, key)

    def runner_pods(self, key: GroupKey) -> list[Obj]:
        return self._owned(self.pods, key)

    def deleted_pods(self, key: GroupKey) -> list[Obj]:
        """The group's runner Pods deleted in the last ``DELETED_POD_MEMORY`` seconds, as
        last seen. In memory only: a restarted operator cannot know why a Pod went."""
        now = self._clock()
        self._expire_deleted(now)
        kept = self._deleted_pods.get(key, {})
        return [obj for at, obj in kept.values() if now - at <= DELETED_POD_MEMORY]

    def changed_at(self, key: GroupKey) -> float:
        """When a runner Job of this group last stopped holding a slot (finished, deleted or
        being deleted), monotonic; 0 if never. Only such changes can make an older Gitea
        snapshot over-count demand: the job that runner did may still show as queued in it.
        Pod status churn does not move this clock, so a busy cluster does not keep every
        snapshot "stale"."""
        return self._changed.get(key, 0.0)

    def released_since(self, key: GroupKey, since: float) -> list[Release]:
        """The group's runner Jobs that stopped holding a slot after ``since`` (monotonic).
        Older releases are dropped: callers ask with their newest Gitea answer's request
        time, which only moves forward."""
        releases = self._released.get(key)
        if not releases:
            return []
        while releases and releases[0].at <= since:
            releases.popleft()
        if not releases:
            del self._released[key]
            return []
        return list(releases)

    def _owned(self, informers: list[Informer], key: GroupKey) -> list[Obj]:
        index = self._index_jobs if informers is self.jobs else self._index_pods
        return list(index.get(key, {}).values())

    def forget(self, key: GroupKey) -> None:
        self._changed.pop(key, None)
        self._released.pop(key, None)
        self._exited.pop(key, None)
        self._deleted_pods.pop(key, None)

    def knows(self, key: GroupKey) -> bool:
        """Whether a clock or a record of ``key``'s Jobs and Pods is kept (not the objects
        themselves: those go with their watch events, or with :meth:`unserve`)."""
        kept = (self._changed, self._released, self._exited, self._deleted_pods)
        return any(key in table for table in kept)

    # -- the share of a replica (--sharding) ----------------------------------------------------

    def _admits(self, obj: Obj) -> bool:
        return self._share is not None and self._share.admits(obj)

    def serves(self, key: GroupKey) -> bool:
        return self._share is None or key in self._share.served

    @property
    def share(self) -> OwnedShare | None:
        """--sharding: the groups served here and the buckets the watches select."""
        return self._share

    async def serve(self, keys: Iterable[GroupKey], shards: Iterable[str] = ()) -> None:
        """Begin to keep the Jobs and Pods of ``keys``, whose domains' shard buckets are
        among ``shards`` (every bucket this replica holds), and fetch those that exist now:
        when this returns, the cache holds each group whole (or the watch's newer word), so
        a first pass of the new owner never acts on a partial view (kube/narrowed.py).
        Raises if a listing failed; the caller tries again before serving those groups."""
        if self._share is None:
            return
        wanted = set(keys) - self._share.fetched
        self._share.served |= wanted
        by_namespace: dict[str, set[str]] = {}
        for key in wanted:
            namespace = key.partition("/")[0]
            by_namespace.setdefault(namespace, set()).add(key)

        async def refresh(namespace: str, named: set[str]) -> None:
            groups = self._informer_for(self.groups, namespace)
            if groups is not None:  # whole again: this replica kept them slim
                await groups.refresh(_items(self._groups_in, namespace, None), named)

        await side_by_side(refresh(ns, named) for ns, named in sorted(by_namespace.items()))
        await self._share.serve(wanted, shards)

    def narrow(self, shards: Iterable[str]) -> None:
        """--sharding, after a round: the watches stop selecting buckets no longer held nor
        needed by a kept object (lazy; kube/narrowed.OwnedShare.narrow)."""
        if self._share is not None:
            self._share.narrow(shards)

    def _groups_in(self, namespace: str, **options: Any) -> Any:
        g, v, p = constants.GROUP, constants.VERSION, constants.PLURAL
        return self._custom.list_namespaced_custom_object(g, v, namespace, p, **options)

    def _slim_group(self, obj: Obj) -> Obj:
        return slim_group(obj) if self.serves(object_key(obj)) else slim_unserved_group(obj)

    def _informer_for(self, informers: list[Informer], namespace: str) -> Informer | None:
        if not self._namespaced:
            return informers[0]
        return next((i for i in informers if i.name.endswith(f"/{namespace}")), None)

    def unserve(self, keys: Iterable[GroupKey]) -> None:
        """Stop keeping the Jobs and Pods of ``keys`` (served elsewhere now) and forget them."""
        if self._share is None:
            return
        gone = set(keys)
        self._share.unserve(gone)
        for informer in self.groups:
            informer.reshape(gone)
        for key in gone:
            self._index_jobs.pop(key, None)
            self._index_pods.pop(key, None)
            self.forget(key)

    # -- events -------------------------------------------------------------------------------

    def _on_group(self, kind: str, obj: Obj, before: Obj | None) -> None:
        self.group_changes += 1
        key = object_key(obj)
        for listener in self._group_listeners:
            listener(key, kind, obj, before)

    def _on_job(self, kind: str, obj: Obj, before: Obj | None) -> None:
        key = group_key_of_owned(obj)
        if key is None:
            return
        self._index(self._index_jobs, key, kind, obj)
        name = (obj.get("metadata") or {}).get("name", "")
        exited = self._exited.get(key)
        if exited is not None and name in exited and (kind == "DELETED" or not _holds_slot(obj)):
            exited.discard(name)  # released already, when its runner Pod succeeded
            if not exited:
                del self._exited[key]
        elif frees_slot(kind, obj, before):
            self._release(key, obj)
        self._notify_owned(key, kind, obj, before)

    def _release(self, key: GroupKey, job: Obj) -> None:
        now = self._clock()
        self._changed[key] = now
        meta = job.get("metadata") or {}
        took = (meta.get("annotations") or {}).get(constants.TOOK_JOB_ANNOTATION) == "true"
        self._released.setdefault(key, deque(maxlen=MAX_RELEASES)).append(
            Release(now, meta.get("name", ""), took)
        )

    def _pod_exit_releases(self, key: GroupKey, obj: Obj, before: Obj | None) -> None:
        """A runner Pod that just succeeded frees its Job's slot (views.runner_exited)
        before the Job controller marks the Job Complete: release it now, once."""
        if not runner_exited([obj]) or (before is not None and runner_exited([before])):
            return
        labels = (obj.get("metadata") or {}).get("labels") or {}
        job_name = labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")
        job = self._index_jobs.get(key, {}).get(job_name or "")
        if job is None or not _holds_slot(job) or job_name in self._exited.get(key, ()):
            return
        self._exited.setdefault(key, set()).add(job["metadata"]["name"])
        self._release(key, job)

    def _on_pod(self, kind: str, obj: Obj, before: Obj | None) -> None:
        key = group_key_of_owned(obj)
        if key is None:
            return
        self._index(self._index_pods, key, kind, obj)
        if kind != "DELETED":
            self._pod_exit_releases(key, obj, before)
        if kind == "DELETED":
            now = self._clock()
            self._expire_deleted(now)
            kept = self._deleted_pods.setdefault(key, {})
            kept.pop(obj["metadata"]["name"], None)  # re-inserted: the oldest stay first
            kept[obj["metadata"]["name"]] = (now, obj)
            while len(kept) > DELETED_PODS_PER_GROUP:
                del kept[next(iter(kept))]
        self._notify_owned(key, kind, obj, before)

    def _expire_deleted(self, now: float) -> None:
        """Drop deleted Pods older than ``DELETED_POD_MEMORY``: every group's, swept at most
        once per tenth of that (so a group nobody reads any more is emptied too)."""
        if now - self._deleted_swept < DELETED_POD_MEMORY / 10:
            return
        self._deleted_swept = now
        for key in list(self._deleted_pods):
            kept = self._deleted_pods[key]
            while kept and now - next(iter(kept.values()))[0] > DELETED_POD_MEMORY:
                del kept[next(iter(kept))]
            if not kept:
                del self._deleted_pods[key]

    @staticmethod
    def _index(index: dict[GroupKey, dict[str, Obj]], key: GroupKey, kind: str, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            names = index.get(key)
            if names is not None:
                names.pop(name, None)
                if not names:
                    del index[key]
        else:
            index.setdefault(key, {})[name] = obj

    def _notify_owned(self, key: GroupKey, kind: str, obj: Obj, before: Obj | None) -> None:
        for listener in self._owned_listeners:
            listener(key, kind, obj, before)


def _holds_slot(job: Obj | None) -> bool:
    if job is None:
        return False
    meta = job.get("metadata") or {}
    return not meta.get("deletionTimestamp") and not job_finished(job)


def frees_slot(kind: str, obj: Obj, before: Obj | None) -> bool:
    """A runner Job stopped holding a slot: finished, deleted or being deleted."""
    if kind == "DELETED":
        return before is None or _holds_slot(before) or _holds_slot(obj)
    return _holds_slot(before) and not _holds_slot(obj)


def spec_changed(kind: str, obj: Obj, before: Obj | None) -> bool:
    """Filter for RunnerGroup events: our own status writes must not trigger reconciles."""
    if kind in ("ADDED", "DELETED") or before is None:
        return True
    new_meta, old_meta = obj.get("metadata") or {}, before.get("metadata") or {}
    return (
        new_meta.get("generation") != old_meta.get("generation")
        or new_meta.get("uid") != old_meta.get("uid")
        or bool(new_meta.get("deletionTimestamp")) != bool(old_meta.get("deletionTimestamp"))
        # Adding our finalizer changes no generation, and is what the next pass waits for.
        or new_meta.get("finalizers") != old_meta.get("finalizers")
        # The uninstall hook's detach mark (api/detach.py), the only annotation slimming keeps.
        or new_meta.get("annotations") != old_meta.get("annotations")
    )
