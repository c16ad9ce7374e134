"""``coordination.k8s.io/v1`` Leases as the operator reads and writes them: a typed record
of what was read, the body of a write, and client-go's rule for when another holder's Lease
has lapsed. Shared by the leader Lease (runtime/leadership.py) and the membership Leases
(sharding/leases/membership.py), so that both follow one reading of the same rules.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

API_VERSION = "coordination.k8s.io/v1"


def _micro(value: Any) -> str | None:
    """A MicroTime as the API spells it; the client hands a datetime over."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return str(value)


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """One Lease as read. ``version`` is its resourceVersion: a write carrying it is a
    compare-and-swap that the API server refuses (409) if anyone wrote in between."""

    name: str
    version: str
    holder: str | None = None
    renewed: str | None = None
    acquired: str | None = None
    duration: int | None = None
    transitions: int = 0
    annotations: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, lease: Any) -> LeaseRecord:
        """From the client's V1Lease (or anything shaped like it)."""
        meta, spec = lease.metadata, lease.spec
        return cls(
            name=meta.name,
            version=str(meta.resource_version),
            holder=(spec.holder_identity or None) if spec is not None else None,
            renewed=_micro(spec.renew_time) if spec is not None else None,
            acquired=_micro(spec.acquire_time) if spec is not None else None,
            duration=spec.lease_duration_seconds if spec is not None else None,
            transitions=(spec.lease_transitions or 0) if spec is not None else 0,
            annotations=dict(meta.annotations or {}),
        )

    def sighting(self) -> tuple[str | None, str | None, str]:
        """What must change for the holder to count as alive: holder, renew time, version."""
        return (self.holder, self.renewed, self.version)


def lease_body(
    namespace: str,
    name: str,
    spec: dict[str, Any],
    *,
    version: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Lease to create (``version`` None) or to replace in a compare-and-swap."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    if version is not None:
        metadata["resourceVersion"] = version
    return {"apiVersion": API_VERSION, "kind": "Lease", "metadata": metadata, "spec": spec}


class Sightings:
    """client-go's lapse rule: another holder's Lease has lapsed only once this reader has
    seen the same record (holder, renew time, resourceVersion) unchanged for the Lease's
    duration on its own clock. Nodes' clocks never enter it, so skew between them does not
    matter; only the reader's monotonic clock does."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._seen: dict[str, tuple[tuple[str | None, str | None, str], float]] = {}

    def lapsed(self, record: LeaseRecord, duration: float, asked: float | None = None) -> bool:
        """Whether ``record`` has gone unchanged for ``duration`` seconds since first seen.
        ``asked``: when the read that returned it was sent. The read proves the record
        unchanged only until then, while its first sighting counts from when the answer was
        handled: an answer handled late (a busy event loop) must not look like a longer
        silence than it shows."""
        now = self._clock()
        seen = self._seen.get(record.name)
        if seen is None or seen[0] != record.sighting():
            seen = (record.sighting(), now)
            self._seen[record.name] = seen
        return (now if asked is None else asked) - seen[1] >= duration

    def lapse_in(self, record: LeaseRecord, duration: float, asked: float) -> float:
        """Seconds from ``asked`` until ``record``, seen by :meth:`lapsed` already, would
        count as lapsed were it to stay unchanged: a reader that reads again then sees the
        lapse when it falls due, not up to a read period later. The wait is the same."""
        seen = self._seen.get(record.name)
        first = seen[1] if seen is not None else asked
        return max(0.0, first + duration - asked)

    def retain(self, names: Iterable[str]) -> None:
        """Forget Leases no longer listed (deleted ones: they are simply gone)."""
        keep = set(names)
        for gone in set(self._seen) - keep:
            del self._seen[gone]
