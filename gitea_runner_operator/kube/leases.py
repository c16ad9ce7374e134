"""The Lease calls, in one place for the leader Lease and the membership Leases: every call
carries LEASE_TIMEOUT, a missing Lease reads as None, and a write that lost a
compare-and-swap (409) returns None instead of raising, because losing that race is an
ordinary outcome of electing, not an error. Every other failure raises; the callers decide
that it means "not renewed" (objects/leases.py has the records and bodies)."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.kube.http import LEASE_TIMEOUT
from gitea_runner_operator.objects.leases import LeaseRecord


class LeaseCalls:
    """One namespace's Leases. ``leases``: a CoordinationV1Api (tests pass a fake one)."""

    def __init__(self, leases: Any, namespace: str, timeout: float = LEASE_TIMEOUT) -> None:
        self._leases = leases
        self.namespace = namespace
        self._timeout = timeout

    @classmethod
    def on(
        cls, api: client.ApiClient | None, namespace: str, timeout: float, leases: Any = None
    ) -> LeaseCalls:
        """On ``leases`` when given, else on the CoordinationV1Api of ``api``."""
        return cls(
            leases if leases is not None else client.CoordinationV1Api(api), namespace, timeout
        )

    async def read(self, name: str) -> LeaseRecord | None:
        try:
            lease = await self._leases.read_namespaced_lease(
                name, self.namespace, _request_timeout=self._timeout
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return LeaseRecord.of(lease)

    async def write(self, body: dict[str, Any]) -> str | None:
        """Create the Lease (no resourceVersion in ``body``) or replace the version read;
        the new resourceVersion, or None when someone else wrote first (409)."""
        meta = body["metadata"]
        try:
            if meta.get("resourceVersion") is None:
                written = await self._leases.create_namespaced_lease(
                    self.namespace, body, _request_timeout=self._timeout
                )
            else:
                written = await self._leases.replace_namespaced_lease(
                    meta["name"], self.namespace, body, _request_timeout=self._timeout
                )
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise
        return str(written.metadata.resource_version)

    async def list(self, label_selector: str) -> list[LeaseRecord]:
        found = await self._leases.list_namespaced_lease(
            self.namespace, label_selector=label_selector, _request_timeout=self._timeout
        )
        return [LeaseRecord.of(lease) for lease in found.items or ()]

    async def delete(self, name: str, version: str) -> None:
        """Delete ``name`` only at ``version``: never a Lease someone else wrote since."""
        await self._leases.delete_namespaced_lease(
            name,
            self.namespace,
            body=client.V1DeleteOptions(
                preconditions=client.V1Preconditions(resource_version=version)
            ),
            _request_timeout=self._timeout,
        )
