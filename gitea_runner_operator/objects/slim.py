"""What the informer caches keep of each object: only what the operator reads, in as few
bytes as it can. Thousands of runner Jobs and Pods are cached at a fill's peak, and each is
kept for its TTL after it finished (deleted Pods another 600 s): what is kept per object is
paid that many times. Two rules:

- **Slim:** a runner Job without its spec (the tenant's Pod template), a Pod without its
  spec or the kubelet's bookkeeping, any object without labels and annotations the operator
  does not read (a tenant's template may add 256 KiB of them to every Pod, ``kubectl apply``
  copies a whole RunnerGroup into one).
- **Shared:** keys and the values repeated from object to object (condition types and
  statuses, reasons, phases) come from one table, so the thousandth Pod's
  ``"lastTransitionTime"`` and ``"True"`` reuse the first one's strings
  (2,000 runner Jobs and 2,000 Pods: 14.1 MiB slimmed, 9.8 MiB slimmed and shared, 30.1 MiB
  as parsed; `python -m tests.benchmarks.cache_footprint`). The table is bounded.

Why dicts and not typed views: every reader (objects/views.py, objects/disruption.py, the reaper)
takes the object in the API server's JSON shape, which is also what the unit tests and the
fakes write; typed views would be a second shape of every object for all of them to follow.
With the two rules the runner objects of a 2,000-runner peak take 9.8 MiB, 4 % of that
peak's 250 MB target.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final

from gitea_runner_operator.api import constants
from gitea_runner_operator.api.caps import KEPT_VALUE_MAX_CHARS
from gitea_runner_operator.api.detach import ANNOTATIONS as DETACH_ANNOTATIONS
from gitea_runner_operator.objects.forgejo_job import (
    FORGE_ANNOTATION,
    HANDLE_ANNOTATION,
    RUNNER_ID_ANNOTATION,
)
from gitea_runner_operator.objects.views import SAFE_TO_EVICT

Obj = dict[str, Any]

# Values repeated across runner Jobs and Pods (condition types and statuses, reasons,
# phases, our labels' values); names, uids, versions and times are each object's own.
SHARED_VALUES = frozenset(
    {"type", "status", "reason", "phase", constants.MANAGED_BY_LABEL, constants.APP_LABEL}
)
SHARED_UP_TO = 64  # characters: longer values (messages) are never shared
SHARED_MAX = 4096  # strings in the table: about 0.5 MiB at most


def strip_managed_fields(obj: Obj) -> Obj:
    """controller-runtime's TransformStripManagedFields: server-side apply bookkeeping is
    often most of an object's size, and nothing here reads it."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


class _Table:
    """One copy of each shared string, held for the process's life. Not ``sys.intern``:
    CPython 3.12 before its August 2024 fixes made interned strings immortal, so every
    name or version passed through it would stay. Bounded: past ``SHARED_MAX`` strings,
    new ones are kept as they are."""

    def __init__(self, limit: int = SHARED_MAX) -> None:
        self._strings: dict[str, str] = {}
        self._limit = limit

    def __len__(self) -> int:
        return len(self._strings)

    def get(self, text: str) -> str:
        found = self._strings.get(text)
        if found is not None:
            return found
        if len(self._strings) < self._limit and len(text) <= SHARED_UP_TO:
            self._strings[text] = text
        return text


TABLE = _Table()


def shared_obj(obj: Obj) -> Obj:
    """A copy of ``obj`` whose keys, and values of :data:`SHARED_VALUES` keys, are the
    table's copies. Only slimmed objects come here: their keys are a fixed schema and the
    operator's own, never a tenant's."""
    return {
        TABLE.get(k): TABLE.get(v) if k in SHARED_VALUES and isinstance(v, str) else _shared(v)
        for k, v in obj.items()
    }


def _shared(value: Any) -> Any:
    if isinstance(value, dict):
        return shared_obj(value)
    if isinstance(value, list):
        return [_shared(v) for v in value]
    return value


def slim_group(obj: Obj) -> Obj:
    """A RunnerGroup without what nothing here reads: server-side apply's bookkeeping, and
    labels and annotations not on the allow-list. ``kubectl apply`` keeps a copy of the
    whole manifest in ``last-applied-configuration``, and a tenant may add up to 256 KiB
    more; the cache would hold both for every group. The operator writes groups by patch
    only, never by replacing the object it read, so nothing dropped here is written back.
    The uninstall hook's detach mark (api/detach.py) is the one annotation kept, within
    ``KEPT_VALUE_MAX_CHARS`` as the runners' annotations are: the tenant can write it too."""
    obj = strip_managed_fields(obj)
    meta = obj.get("metadata")
    if isinstance(meta, dict) and (meta.get("annotations") or meta.get("labels")):
        slim_meta = {k: v for k, v in meta.items() if k not in ("annotations", "labels")}
        kept = _allowed(meta.get("annotations"), DETACH_ANNOTATIONS)
        if kept:
            slim_meta["annotations"] = kept
        obj = {**obj, "metadata": slim_meta}
    return obj  # not shared: a group's spec has keys its tenant chose


def slim_unserved_group(obj: Obj) -> Obj:
    """A RunnerGroup another replica serves (``--sharding``), as this one keeps it: what the
    layout and the webhook's routing read (its metadata and spec) and whether its Ready
    condition is True (sharding/shapes.py), not the rest of its status, about two thirds of
    a group's size. The replica that takes the group reads it whole again first
    (kube/cache.ClusterCache.serve)."""
    obj = slim_group(obj)
    status = obj.get("status")
    if not isinstance(status, dict):
        return obj
    conditions = status.get("conditions")
    ready = [
        {"type": "Ready", "status": c.get("status")}
        for c in (conditions if isinstance(conditions, list) else [])
        if isinstance(c, dict) and c.get("type") == "Ready"
    ][:1]
    return {**obj, "status": {"conditions": ready} if ready else {}}


_JOB_METADATA = frozenset(
    {"name", "namespace", "uid", "resourceVersion", "labels", "creationTimestamp",
     "deletionTimestamp", "generation"}
)  # fmt: skip


def slim_job(obj: Obj) -> Obj:
    """A runner Job as the operator reads it: its identity, labels, our own annotations and
    its conditions. Not its spec: that holds the tenant's Pod template, often most of the
    object, and one copy per runner would make memory grow with what tenants write."""
    meta = obj.get("metadata") or {}
    conditions = [
        {"type": c.get("type"), "status": c.get("status")}
        for c in (obj.get("status") or {}).get("conditions") or []
    ]
    return shared_obj({"metadata": _slim_metadata(meta), "status": {"conditions": conditions}})


_POD_STATUS = ("phase", "reason", "message", "conditions")
_CONDITION = ("type", "status", "reason", "message", "lastTransitionTime")
_CONTAINER_STATUS = ("name", "state", "lastState", "ready", "started", "restartCount")


def slim_pod(obj: Obj) -> Obj:
    """A runner Pod as the operator reads it (objects/views.py, objects/disruption.py): identity
    and the labels and annotations read here, and of its status the phase, reason,
    conditions and each container's name and states.
    Not its spec, nor the kubelet's bookkeeping (images, ids, IPs, resources, volume
    mounts), which is most of a running Pod's status: thousands of runner Pods are cached."""
    obj = strip_managed_fields(obj)
    status = obj.get("status") or {}
    slim_status: Obj = {k: status[k] for k in _POD_STATUS if k in status}
    if "conditions" in slim_status:
        slim_status["conditions"] = [_pick(c, _CONDITION) for c in status["conditions"] or []]
    for key in ("initContainerStatuses", "containerStatuses"):
        if status.get(key):
            slim_status[key] = [_pick(c, _CONTAINER_STATUS) for c in status[key]]
    return shared_obj(
        {"metadata": _slim_metadata(obj.get("metadata") or {}), "status": slim_status}
    )


# The labels and annotations the operator reads of a runner Job or Pod: an allow-list, not
# its prefix, since a tenant's own Pods and Jobs may carry thousands of keys under that
# prefix (200 such Pods held 156 MiB when the prefix was the rule). Besides the operator's
# own: the Job a Pod belongs to (set by the Job controller) and whether the node autoscaler
# may evict it (objects/views.py).
READ_LABELS: Final = frozenset(
    {
        constants.GROUP_NAME_LABEL,
        constants.MANAGED_BY_LABEL,
        constants.SHARD_LABEL,  # --sharding: the buckets a replica's watches follow
        "batch.kubernetes.io/job-name",
        "job-name",
    }
)
READ_ANNOTATIONS: Final = frozenset(
    {
        constants.TOOK_JOB_ANNOTATION,
        constants.RUNNER_LABELS_ANNOTATION,
        FORGE_ANNOTATION,
        HANDLE_ANNOTATION,
        RUNNER_ID_ANNOTATION,
        SAFE_TO_EVICT,
    }
)


def _slim_metadata(meta: Obj) -> Obj:
    """Identity, and of the labels and annotations only those read here, each value within
    ``KEPT_VALUE_MAX_CHARS`` (a longer one is dropped whole, not cut). A tenant's
    ``spec.template`` may give runner Pods up to 256 KiB of annotations each; kept whole, a
    few thousand runner Pods would hold that many copies."""
    slim = {k: v for k, v in meta.items() if k in _JOB_METADATA and k != "labels"}
    for field, allowed in (("labels", READ_LABELS), ("annotations", READ_ANNOTATIONS)):
        kept = _allowed(meta.get(field), allowed)
        if kept:
            slim[field] = kept
    return slim


def _allowed(items: Obj | None, allowed: Collection[str]) -> Obj:
    if not isinstance(items, dict):
        return {}
    return {
        k: items[k]
        for k in allowed
        if isinstance(items.get(k), str) and len(items[k]) <= KEPT_VALUE_MAX_CHARS
    }


def _pick(item: Obj, keys: tuple[str, ...]) -> Obj:
    return {k: item[k] for k in keys if k in item}
