"""Membership Leases: each replica holds a ``coordination.k8s.io/v1`` Lease of its own,
``<release>-member-<pod>``, renews it, lists the others' to learn who is alive and what
each publishes, and gives it up when it stops (sharding/tenure.py decides what to do
with a read; this module only talks to the API server).

The liveness rules are client-go's, as in runtime/leadership.py, and so are the calls
(kube/leases.py) and the lapse rule (objects/leases.Sightings): every call has a timeout
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
from typing import Any

import structlog
from kubernetes_asyncio import client

from gitea_runner_operator.kit.clock import utc_now_micro
from gitea_runner_operator.kube.http import LEASE_TIMEOUT
from gitea_runner_operator.kube.leases import LeaseCalls
from gitea_runner_operator.objects.leases import LeaseRecord, Sightings, lease_body
from gitea_runner_operator.sharding.forwards import WEBHOOK_ANNOTATION, parse_address
from gitea_runner_operator.sharding.tenure import ANNOTATION, Published, Reading

log = structlog.get_logger(__name__)

MEMBERS_LABEL = "gitea-runners.dev/members"  # value: the release; lists one release's Leases
COLLECT_PER_READ = 4  # lapsed Leases deleted per read at the most: a read stays short
_NAME_MAX = 253
_UNSAFE = re.compile(r"[^a-z0-9.-]+")


def lease_name(release: str, identity: str) -> str:
    """``<release>-member-<identity>`` as a valid object name (lower case, at most 253)."""
    raw = _UNSAFE.sub("-", f"{release}-member-{identity}".lower()).strip("-.")
    return raw[:_NAME_MAX].rstrip("-.")


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
        webhook: str | None = None,
    ) -> None:
        self._calls = LeaseCalls.on(api, namespace, call_timeout, leases)
        self.namespace = namespace
        self.ring = release  # the Helm release: one set of members
        self.identity = identity
        self.name = lease_name(release, identity)
        self._duration = lease_duration
        self._clock = clock
        self._sightings = Sightings(clock)
        self._version: str | None = None  # our own Lease's resourceVersion, as last written
        self._evicted = False
        # Where this replica receives webhooks (sharding/forwards.py), published with every
        # write; and where each fresh member of the latest read receives them (None: nowhere).
        self.webhook = webhook
        self.addresses: dict[str, str | None] = {}

    async def renew(self, published: Published | None) -> bool:
        """Write our Lease (creating it if need be) with a fresh renew time and, when given,
        the record of what we act for. True when the write went through."""
        try:
            return await self._renew(published)
        except Exception as exc:  # API, network, timeouts: all mean "not renewed"
            log.warning("membership lease not renewed", lease=self.name, error=type(exc).__name__)
            return False

    def evicted(self) -> bool:
        """Whether our Lease was found deleted by someone else since the last ask: another
        replica counted it lapsed and may have taken our domains, so we must act on nothing
        until we publish again (the Lease itself is written anew by that renewal)."""
        evicted, self._evicted = self._evicted, False
        return evicted

    async def _renew(self, published: Published | None) -> bool:
        lease = await self._calls.read(self.name)
        if lease is None and self._version is not None:
            self._evicted = True
            log.warning("membership lease was removed by another replica", lease=self.name)
        annotations = dict(lease.annotations) if lease is not None else {}
        if published is not None:
            annotations[ANNOTATION] = published.encode()
        if self.webhook is not None:
            annotations[WEBHOOK_ANNOTATION] = self.webhook
        else:  # webhooks turned off since: peers must not keep forwarding here
            annotations.pop(WEBHOOK_ANNOTATION, None)
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self._duration,
            "renewTime": utc_now_micro(),
        }
        body = lease_body(
            self.namespace,
            self.name,
            spec,
            version=lease.version if lease is not None else None,
            labels={MEMBERS_LABEL: self.ring},
            annotations=annotations,
        )
        written = await self._calls.write(body)
        if written is None:
            return False  # written by someone else in between: try again next period
        self._version = written
        return True

    async def read(self, publication: int) -> Reading | None:
        """Every other member whose Lease is held and fresh, with what it publishes; None
        when the list failed (nothing can be concluded from no answer). ``publication``:
        our own publication count as this read begins (sharding/tenure.Reading)."""
        asked = self._clock()  # the list shows the Leases as they were at this time, or later
        try:
            found = await self._calls.list(f"{MEMBERS_LABEL}={self.ring}")
        except Exception as exc:
            log.warning("membership leases not listed", error=type(exc).__name__)
            return None
        fresh: dict[str, Published | None] = {}
        lapse_in: dict[str, float] = {}
        addresses: dict[str, str | None] = {}
        lapsed: list[LeaseRecord] = []
        for lease in found:
            holder = lease.holder
            if lease.name == self.name or not holder or holder == self.identity:
                continue
            duration = lease.duration or self._duration
            if not self._sightings.lapsed(lease, duration, asked):
                fresh[holder] = Published.decode(lease.annotations.get(ANNOTATION))
                lapse_in[holder] = self._sightings.lapse_in(lease, duration, asked)
                addresses[holder] = parse_address(lease.annotations.get(WEBHOOK_ANNOTATION))
            else:
                lapsed.append(lease)
        self._sightings.retain(lease.name for lease in found)
        self.addresses = addresses
        await self._collect(lapsed[:COLLECT_PER_READ])
        return Reading(fresh, publication, lapse_in)

    async def _collect(self, lapsed: list[LeaseRecord]) -> None:
        """Delete Leases that lapsed on our clock: a replica killed before it could release
        leaves its Lease for ever (pod names change), and every replica started later would
        count it alive for a whole duration on its own clock before taking anything. Its
        holder stepped down long ago (renew deadline < duration); if it comes back it simply
        creates a new Lease. Only the version seen lapsing is deleted, never a renewed one."""
        for lease in lapsed:
            try:
                await self._calls.delete(lease.name, lease.version)
                log.info("removed a lapsed member's lease", lease=lease.name, holder=lease.holder)
            except Exception as exc:  # renewed in between (409), gone (404): nothing to do
                log.debug("lapsed lease not removed", lease=lease.name, error=type(exc).__name__)

    async def release(self) -> None:
        """Delete our Lease, once we act on nothing: the others need not wait for it to
        lapse. Only the version we wrote last is deleted, never one someone else wrote."""
        if self._version is None:
            return
        try:
            await self._calls.delete(self.name, self._version)
            self._version = None
            log.info("membership lease released", lease=self.name)
        except Exception as exc:
            log.warning("membership lease not released", error=type(exc).__name__)
