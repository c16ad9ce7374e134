"""Reads and writes of a group's cache server objects (see ``objects/jobcache_server.py``).

Server-side apply for what the operator owns outright (Secret, Service, Deployment): one
idempotent call creates or corrects the object, and leaves fields other controllers set
(a Service's clusterIP, a Deployment's status) alone. The PVC is only ever created: its
spec is immutable once bound, and resizing it is a decision for its owner (see docs/caches.md).
Every call has a timeout and takes a token from the operator's write rate limiter.

The caller reads an object and checks it is the group's before it writes or deletes it;
these calls carry what it read as a precondition (the ``resourceVersion`` of an apply, the
``uid`` of a delete), so an object replaced in between is refused by the API server rather
than taken over or deleted.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.kit import fence
from gitea_runner_operator.kube.cluster import COMPONENT, TIMEOUT
from gitea_runner_operator.kube.http import send
from gitea_runner_operator.kube.ratelimit import TokenBucket

APPLY_PATCH = "application/apply-patch+yaml"


class CacheObjects:
    def __init__(self, api: client.ApiClient, limiter: TokenBucket | None = None) -> None:
        self._limiter = limiter or TokenBucket(qps=50, burst=100)
        # Any: the generated stubs omit the documented keywords (_content_type, ...).
        self._core: Any = client.CoreV1Api(api)
        self._apps: Any = client.AppsV1Api(api)

    def _api(self, kind: str) -> tuple[Any, str]:
        """The API object and the method suffix of a kind."""
        return {
            "Secret": (self._core, "secret"),
            "Service": (self._core, "service"),
            "PersistentVolumeClaim": (self._core, "persistent_volume_claim"),
            "Deployment": (self._apps, "deployment"),
        }[kind]

    async def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """One object, or None when there is none."""
        api, suffix = self._api(kind)
        try:
            return await send(
                getattr(api, f"read_namespaced_{suffix}")(
                    name, namespace, _preload_content=False, _request_timeout=TIMEOUT
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def apply(self, manifest: dict[str, Any], *, resource_version: str | None) -> None:
        """Server-side apply as the operator's field manager, taking over conflicting fields
        (the operator owns these objects; a hand edit is put back). ``resource_version``:
        the version the caller read and found to be the group's, a precondition (409 if the
        object changed since); None only for an object the caller found absent, and then
        nothing is forced: should another's object appear in between, its fields it manages
        conflict (409) instead of being taken over."""
        if resource_version is not None:
            manifest = {
                **manifest,
                "metadata": {**manifest["metadata"], "resourceVersion": resource_version},
            }
        meta = manifest["metadata"]
        await self._limiter.acquire(meta["namespace"])
        fence.check("cache object write")  # kit/fence.py: per write
        api, suffix = self._api(manifest["kind"])
        await send(
            getattr(api, f"patch_namespaced_{suffix}")(
                meta["name"],
                meta["namespace"],
                manifest,
                field_manager=COMPONENT,
                force=resource_version is not None,
                _content_type=APPLY_PATCH,
                _preload_content=False,
                _request_timeout=TIMEOUT,
            )
        )

    async def create_if_absent(self, manifest: dict[str, Any]) -> bool:
        """Create the object unless it exists; True if this call created it."""
        meta = manifest["metadata"]
        await self._limiter.acquire(meta["namespace"])
        fence.check("cache object write")  # kit/fence.py: per write
        api, suffix = self._api(manifest["kind"])
        try:
            await send(
                getattr(api, f"create_namespaced_{suffix}")(
                    meta["namespace"], manifest, _preload_content=False, _request_timeout=TIMEOUT
                )
            )
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def delete(self, kind: str, namespace: str, name: str, uid: str) -> bool:
        """Delete the object of this ``uid`` (its dependents in the background); False if it
        was gone or is another object by now (the uid precondition failed)."""
        await self._limiter.acquire(namespace)
        fence.check("cache object write")  # kit/fence.py: per write
        api, suffix = self._api(kind)
        options = client.V1DeleteOptions(
            propagation_policy="Background", preconditions=client.V1Preconditions(uid=uid)
        )
        try:
            await send(
                getattr(api, f"delete_namespaced_{suffix}")(
                    name,
                    namespace,
                    body=options,
                    _preload_content=False,
                    _request_timeout=TIMEOUT,
                )
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                return False
            raise
        return True


def secret_values(secret: dict[str, Any]) -> dict[str, str]:
    """A Secret's values, decoded. Values that are not UTF-8 text are left out (no key of
    ours is ever such a value)."""
    out: dict[str, str] = {}
    for key, raw in (secret.get("data") or {}).items():
        try:
            out[key] = base64.b64decode(raw, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            continue
    return out
