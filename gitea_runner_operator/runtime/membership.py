"""Membership Leases: each replica holds a ``coordination.k8s.io/v1`` Lease of its own,
``<release>-member-<pod>``, renews it, lists the others' to learn who is alive and what
each publishes, and gives it up when it stops (reconcile/shards.py decides what to do
with a read; this module only talks to the API server).

The liveness rules are client-go's, as in runtime/leadership.py: every call has a timeout
and a failure is "not renewed", never an exit; another member's Lease counts as lapsed only
once this replica has seen the same record (holder, renew time, resourceVersion) unchanged
for the Lease's duration on its own clock, so clock skew between nodes does not matter; and
every write carries the resourceVersion read (compare-and-swap). Releasing deletes the Lease
(with that resourceVersion as a precondition): pod names change on every rollout, so a
cleared Lease would stay behind forever, while a deleted one is simply not listed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.kit.clock import utc_now_micro
from gitea_runner_operator.kube.http import LEASE_TIMEOUT
from gitea_runner_operator.reconcile.shards import ANNOTATION, Published, Reading

log = structlog.get_logger(__name__)

MEMBERS_LABEL = "gitea-runners.dev/members"  # value: the release; lists one release's Leases
_NAME_MAX = 253
_UNSAFE = re.compile(r"[^a-z0-9.-]+")


def lease_name(release: str, identity: str) -> str:
    """``<release>-member-<identity>`` as a valid object name (lower case, at most 253)."""
    raw = _UNSAFE.sub("-", f"{release}-member-{identity}".lower()).strip("-.")
    return raw[:_NAME_MAX].rstrip("-.")


@dataclass(frozen=True, slots=True)
class _Record:
    holder: str
    renewed: str
    version: str


class MembershipLeases:
    """One replica's own membership Lease, and its reads of everyone's."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        release: str,
        identity: str,
        *,
        lease_duration: int = 15,
        call_timeout: float = LEASE_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
        leases: Any = None,  # a CoordinationV1Api; tests pass a fake
    ) -> None:
        self._leases: Any = leases if leases is not None else client.CoordinationV1Api(api)
        self.namespace = namespace
        self.ring = release  # the Helm release: one set of members
        self.identity = identity
        self.name = lease_name(release, identity)
        self._duration = lease_duration
        self._timeout = call_timeout
        self._clock = clock
        self._seen: dict[str, tuple[_Record, float]] = {}  # Lease name -> (record, since)
        self._version: str | None = None  # our own Lease's resourceVersion, as last written

    async def renew(self, published: Published | None) -> bool:
        """Write our Lease (creating it if need be) with a fresh renew time and, when given,
        the record of what we act for. True when the write went through."""
        try:
            return await self._renew(published)
        except Exception as exc:  # API, network, timeouts: all mean "not renewed"
            log.warning("membership lease not renewed", lease=self.name, error=type(exc).__name__)
            return False

    async def _renew(self, published: Published | None) -> bool:
        try:
            lease = await self._leases.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self._timeout
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            lease = None
        annotations = dict((lease.metadata.annotations or {}) if lease is not None else {})
        if published is not None:
            annotations[ANNOTATION] = published.encode()
        body = self._body(lease.metadata.resource_version if lease else None, annotations)
        try:
            if lease is None:
                written = await self._leases.create_namespaced_lease(
                    self.namespace, body, _request_timeout=self._timeout
                )
            else:
                written = await self._leases.replace_namespaced_lease(
                    self.name, self.namespace, body, _request_timeout=self._timeout
                )
        except ApiException as exc:
            if exc.status == 409:
                return False  # written by someone else in between: try again next period
            raise
        self._version = written.metadata.resource_version
        return True

    def _body(self, version: str | None, annotations: dict[str, str]) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "labels": {MEMBERS_LABEL: self.ring},
            "annotations": annotations,
        }
        if version is not None:
            metadata["resourceVersion"] = version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self._duration,
                "renewTime": utc_now_micro(),
            },
        }

    async def read(self, publication: int) -> Reading | None:
        """Every other member whose Lease is held and fresh, with what it publishes; None
        when the list failed (nothing can be concluded from no answer). ``publication``:
        our own publication count as this read begins (shards.Reading)."""
        try:
            found = await self._leases.list_namespaced_lease(
                self.namespace,
                label_selector=f"{MEMBERS_LABEL}={self.ring}",
                _request_timeout=self._timeout,
            )
        except Exception as exc:
            log.warning("membership leases not listed", error=type(exc).__name__)
            return None
        now = self._clock()
        fresh: dict[str, Published | None] = {}
        listed: set[str] = set()
        for lease in found.items or ():
            name = lease.metadata.name
            spec = lease.spec
            holder = spec.holder_identity if spec is not None else None
            listed.add(name)
            if name == self.name or not holder or holder == self.identity:
                continue
            record = _Record(holder, str(spec.renew_time), str(lease.metadata.resource_version))
            seen = self._seen.get(name)
            if seen is None or seen[0] != record:
                seen = (record, now)
                self._seen[name] = seen
            duration = spec.lease_duration_seconds or self._duration
            if now - seen[1] < duration:
                annotations = lease.metadata.annotations or {}
                fresh[holder] = Published.decode(annotations.get(ANNOTATION))
        for gone in set(self._seen) - listed:
            del self._seen[gone]
        return Reading(fresh, publication)

    async def release(self) -> None:
        """Delete our Lease, once we act on nothing: the others need not wait for it to
        lapse. Only the version we wrote last is deleted, never one someone else wrote."""
        if self._version is None:
            return
        try:
            await self._leases.delete_namespaced_lease(
                self.name,
                self.namespace,
                body=client.V1DeleteOptions(
                    preconditions=client.V1Preconditions(resource_version=self._version)
                ),
                _request_timeout=self._timeout,
            )
            self._version = None
            log.info("membership lease released", lease=self.name)
        except Exception as exc:
            log.warning("membership lease not released", error=type(exc).__name__)
