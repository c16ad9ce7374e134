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

from typing import Any

from gitea_runner_operator.api import constants
from gitea_runner_operator.kube.informer import Obj, strip_managed_fields

# Values repeated across runner Jobs and Pods (condition types and statuses, reasons,
# phases, our labels' values); names, uids, versions and times are each object's own.
SHARED_VALUES = frozenset(
    {"type", "status", "reason", "phase", constants.MANAGED_BY_LABEL, constants.APP_LABEL}
)
SHARED_UP_TO = 64  # characters: longer values (messages) are never shared
SHARED_MAX = 4096  # strings in the table: about 0.5 MiB at most


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
    """A RunnerGroup without what nothing here reads: server-side apply's bookkeeping and
    annotations not the operator's. ``kubectl apply`` keeps a copy of the whole manifest in
    ``last-applied-configuration``, and a tenant may add up to 256 KiB more; the cache would
    hold both for every group. The operator writes groups by patch only, never by replacing
    the object it read, so nothing dropped here is written back."""
    obj = strip_managed_fields(obj)
    meta = obj.get("metadata")
    if isinstance(meta, dict) and meta.get("annotations"):
        ours = _ours(meta["annotations"])
        slim_meta = {k: v for k, v in meta.items() if k != "annotations"}
        if ours:
            slim_meta["annotations"] = ours
        obj = {**obj, "metadata": slim_meta}
    return obj  # not shared: a group's spec has keys its tenant chose


_JOB_METADATA = frozenset(
    {"name", "namespace", "uid", "resourceVersion", "labels", "creationTimestamp",
     "deletionTimestamp", "generation"}
)  # fmt: skip


def slim_job(obj: Obj) -> Obj:
    """A runner Job as the operator reads it: its identity, labels, our own annotations and
    its conditions. Not its spec: that holds the tenant's Pod template, often most of the
    object, and one copy per runner would make memory grow with what tenants write."""
    meta = obj.get("metadata") or {}
    slim_meta = {k: v for k, v in meta.items() if k in _JOB_METADATA}
    ours = _ours(meta.get("annotations"))
    if ours:
        slim_meta["annotations"] = ours
    conditions = [
        {"type": c.get("type"), "status": c.get("status")}
        for c in (obj.get("status") or {}).get("conditions") or []
    ]
    return shared_obj({"metadata": slim_meta, "status": {"conditions": conditions}})


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
        {"metadata": _slim_pod_metadata(obj.get("metadata") or {}), "status": slim_status}
    )


# Read from a runner Pod besides the operator's own keys: the Job it belongs to (set by the
# Job controller) and whether the node autoscaler may evict it (objects/views.py).
_POD_LABELS = frozenset({"batch.kubernetes.io/job-name", "job-name"})
_POD_ANNOTATIONS = frozenset({"cluster-autoscaler.kubernetes.io/safe-to-evict"})


def _slim_pod_metadata(meta: Obj) -> Obj:
    """Identity, and of the labels and annotations only those read here. A tenant's
    ``spec.template`` may give runner Pods up to 256 KiB of annotations each; kept whole,
    a few thousand runner Pods would hold that many copies."""
    slim = {k: v for k, v in meta.items() if k in _JOB_METADATA and k != "labels"}
    for field, others in (("labels", _POD_LABELS), ("annotations", _POD_ANNOTATIONS)):
        kept = _ours(meta.get(field), others)
        if kept:
            slim[field] = kept
    return slim


def _ours(items: Obj | None, others: frozenset[str] = frozenset()) -> Obj:
    """The operator's own keys (its API group's prefix), and ``others``."""
    return {
        k: v for k, v in (items or {}).items() if k.startswith(constants.GROUP + "/") or k in others
    }


def _pick(item: Obj, keys: tuple[str, ...]) -> Obj:
    return {k: item[k] for k in keys if k in item}
