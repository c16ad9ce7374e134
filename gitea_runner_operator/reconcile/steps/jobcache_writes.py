"""Writes and deletes of a group's cache objects that touch only what the operator made.

Before it writes or deletes, it reads each object and goes on only if the object carries
the group's label and owner reference (:func:`made_for`); anything else of that name is
refused with ``CacheObjectNotOwned``, never applied over, reused or deleted. The write or
delete then carries what was read as a precondition (the ``resourceVersion`` of an apply,
the ``uid`` of a delete), so an object replaced in between is refused by the API server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import structlog
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.api.cache import SECRET_KEY, cache_object_name
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.kube.cache_objects import secret_values
from gitea_runner_operator.kube.cluster import api_message
from gitea_runner_operator.objects.jobcache_server import made_for
from gitea_runner_operator.reconcile.jobcache_plan import (
    NOT_OWNED,
    not_owned_message,
    render_objects,
)

log = structlog.get_logger(__name__)

SERVER_KINDS = ("Service", "PersistentVolumeClaim", "Deployment")


class Objects(Protocol):
    async def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None: ...
    async def apply(self, manifest: dict[str, Any], *, resource_version: str | None) -> None: ...
    async def create_if_absent(self, manifest: dict[str, Any]) -> bool: ...
    async def delete(self, kind: str, namespace: str, name: str, uid: str) -> bool: ...


class CacheRefusal(Exception):
    """The cache cannot be written as the spec says; ``reason`` and ``message`` go into
    ``status.cache`` and a Warning Event."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


class OwnedWrites:
    def __init__(self, objects: Objects) -> None:
        self._objects = objects

    async def apply(
        self,
        meta: dict[str, Any],
        spec: RunnerGroupSpec,
        user_config: str | None,
        external_secret: str | None,
        token: Callable[[], str],
    ) -> None:
        """Read every object, refuse if one is not the group's, then write them all."""
        cache = spec.cache
        assert cache is not None
        ns, name, uid = meta["namespace"], meta["name"], str(meta["uid"])
        kinds = ["Secret"]
        if cache.external_server is None:
            kinds += [k for k in SERVER_KINDS if cache.persistent or k != "PersistentVolumeClaim"]
        try:
            found: dict[str, dict[str, Any] | None] = {}
            for kind in kinds:
                existing = await self._objects.read(kind, ns, cache_object_name(name))
                if existing is not None and not made_for(existing, name, uid):
                    raise CacheRefusal(NOT_OWNED, not_owned_message(kind, ns, name))
                found[kind] = existing
            secret = external_secret
            if secret is None:
                secret = secret_values(found["Secret"] or {}).get(SECRET_KEY) or token()
            objects = render_objects(meta, spec, secret=secret, user_config=user_config)
            for manifest in objects:
                existing = found[manifest["kind"]]
                if manifest["kind"] == "PersistentVolumeClaim":
                    # Only ever created; one that appeared since the read is checked again.
                    if existing is None and not await self._objects.create_if_absent(manifest):
                        raise CacheRefusal(
                            NOT_OWNED,
                            not_owned_message("PersistentVolumeClaim", ns, name),
                        )
                    continue
                version = None if existing is None else existing["metadata"]["resourceVersion"]
                await self._objects.apply(manifest, resource_version=version)
        except ApiException as exc:
            if exc.status in (400, 403, 422):
                # The API server's message names the rule (RBAC, Pod Security, quota), never
                # a value of ours.
                raise CacheRefusal("CacheRefused", api_message(exc)) from None
            raise

    async def remove(self, meta: dict[str, Any], *, keep_secret: bool) -> None:
        """The group no longer wants its cache server: delete what the operator made for it
        (owner references would only remove it with the group), each object by the uid it
        was read with; an object of that name that is not the group's is left alone."""
        ns, group, obj = meta["namespace"], meta["name"], cache_object_name(meta["name"])
        kinds = SERVER_KINDS if keep_secret else (*SERVER_KINDS, "Secret")
        for kind in kinds:
            try:
                existing = await self._objects.read(kind, ns, obj)
                if existing is None:
                    continue
                if not made_for(existing, group, str(meta.get("uid"))):
                    log.warning(
                        "cache object not made for this group left alone",
                        kind=kind,
                        namespace=ns,
                        name=obj,
                    )
                    continue
                await self._objects.delete(kind, ns, obj, str(existing["metadata"]["uid"]))
            except ApiException as exc:
                if exc.status != 403:
                    raise
                log.warning("may not delete cache object", kind=kind, namespace=ns, name=obj)
