"""Pure decisions of ``spec.cache``: the objects a group's cache needs, their fingerprint,
whether an existing object may be touched, and ``status.cache``.

Kept apart from the I/O of :mod:`gitea_runner_operator.reconcile.steps.jobcache` so each rule is
written once and tested without an API server.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from gitea_runner_operator.api.cache import (
    CACHE_PORT,
    RUNNER_CONFIG_KEY,
    SECRET_KEY,
    SERVER_CONFIG_KEY,
    cache_object_name,
    merge_runner_config,
    server_config,
    service_url,
)
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.objects import jobcache_server as render
from gitea_runner_operator.objects.views import parse_time

PVC_PENDING_WARNING: Final = 120.0  # a claim Pending this long gets a Warning
NOT_OWNED: Final = "CacheObjectNotOwned"
# Stands for the generated secret in a fingerprint: it is state kept in the Secret, not
# something the spec can change, and it is never hashed where it could be compared.
GENERATED: Final = "generated"


def render_objects(
    meta: Mapping[str, Any],
    spec: RunnerGroupSpec,
    *,
    secret: str,
    user_config: str | None,
) -> list[dict[str, Any]]:
    """Every object the group's cache needs, in the order they are written (the Secret
    first: runner Pods and the server mount it; the PVC before the Deployment using it).
    ``meta``: the RunnerGroup's metadata (its name, namespace and uid own the objects)."""
    cache = spec.cache
    assert cache is not None
    group_name, namespace = str(meta["name"]), str(meta["namespace"])
    owned = {"group_name": group_name, "namespace": namespace, "group_uid": str(meta.get("uid"))}
    external = cache.external_server
    url = external.url if external is not None else service_url(group_name, namespace)
    values = {
        RUNNER_CONFIG_KEY: merge_runner_config(
            user_config, server_url=url, secret=secret, offline_mode=cache.offline_mode
        )
    }
    if external is not None:
        return [render.render_secret(**owned, values=values)]
    values |= {SECRET_KEY: secret, SERVER_CONFIG_KEY: server_config(secret)}
    objects = [render.render_secret(**owned, values=values), render.render_service(**owned)]
    if cache.persistent:
        objects.append(render.render_pvc(**owned, spec=spec))
    return [*objects, render.render_deployment(**owned, spec=spec)]


def fingerprint(
    meta: Mapping[str, Any],
    spec: RunnerGroupSpec,
    *,
    user_config: str | None,
    external_secret: str | None,
) -> str:
    """A digest of what the group's cache objects would be: it changes when, and only when,
    a re-apply would change them (the spec, the runner config, the external secret). The
    generated secret is left out: the spec cannot change it. Kept in memory only."""
    secret = GENERATED
    if external_secret is not None:
        secret = hashlib.sha256(external_secret.encode()).hexdigest()
    objects = render_objects(meta, spec, secret=secret, user_config=user_config)
    return hashlib.sha256(json.dumps(objects, sort_keys=True).encode()).hexdigest()


def not_owned_message(kind: str, namespace: str, group_name: str) -> str:
    name = cache_object_name(group_name)
    return (
        f"spec.cache: {kind} {namespace}/{name} exists but was not made by the operator for "
        f"this RunnerGroup (it lacks the label {render.CACHE_OF_LABEL}={group_name} or an "
        "owner reference to the group); the operator will not change, reuse or delete it: "
        "remove or rename that object, or give the group another name"
    )


def cache_status(
    *,
    group_name: str,
    namespace: str,
    deployment: dict[str, Any] | None,
    pvc: dict[str, Any] | None,
    persistent: bool,
    now: float,
) -> dict[str, Any]:
    """``status.cache`` of a group whose cache server the operator runs."""
    name = cache_object_name(group_name)
    base: dict[str, Any] = {
        "ready": False,
        "service": f"{name}:{CACHE_PORT}",
        "url": service_url(group_name, namespace),
    }
    if persistent and pvc is not None and (pvc.get("status") or {}).get("phase") == "Pending":
        created = parse_time((pvc.get("metadata") or {}).get("creationTimestamp"))
        if created is not None and now - created >= PVC_PENDING_WARNING:
            storage_class = (pvc.get("spec") or {}).get("storageClassName") or "(default)"
            return base | {
                "reason": "CacheVolumePending",
                "message": (
                    f"PersistentVolumeClaim {name} is not bound after "
                    f"{int(now - created)}s (storageClassName {storage_class}): no volume or "
                    "provisioner can serve it; set spec.cache.storageClassName or "
                    "spec.cache.persistent: false"
                ),
            }
    ready = int(((deployment or {}).get("status") or {}).get("readyReplicas") or 0) >= 1
    if ready:
        return base | {"ready": True, "reason": "Ready", "message": "the cache server is ready"}
    return base | {"reason": "CacheServerStarting", "message": "the cache server is not ready yet"}
