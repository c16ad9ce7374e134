"""The ensure step of ``spec.cache``: keep a group's cache server and its runners' config.

Run by the reconciler on every pass, but it acts at most every ``resync`` seconds per group
(or at once when the group's spec changed), so a quiet group costs a few reads a minute:
reads of the cache Secret and the group's runnerConfig, server-side applies of the owned
objects, then reads of the Deployment and the PVC for ``status.cache``. The runner config
Secret must exist before a runner Pod can mount it, so :meth:`CacheServers.ensure` says
whether runners may be created.

The generated ``external_secret`` is made once and read back from the Secret ever after
(a restarted operator keeps it); it is written only into that Secret, never into a Job,
log, Event or status.
"""

from __future__ import annotations

import secrets as pysecrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.api.cache import (
    CACHE_PORT,
    RUNNER_CONFIG_KEY,
    SECRET_KEY,
    SERVER_CONFIG_KEY,
    RunnerConfigConflict,
    cache_object_name,
    merge_runner_config,
    server_config,
    service_url,
    uses_cache,
)
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.kube import cache_server as render
from gitea_runner_operator.kube.cluster import api_message
from gitea_runner_operator.kube.configmaps import ReferenceProblem
from gitea_runner_operator.kube.secrets import SecretProblem
from gitea_runner_operator.kube.views import parse_time

log = structlog.get_logger(__name__)

RESYNC = 120.0  # seconds between full passes of an unchanged, healthy group
STATUS_EVERY = 15.0  # seconds between status reads while the server is not ready
PVC_PENDING_WARNING = 120.0  # a claim Pending this long gets a Warning
MAX_GROUPS = 10_000  # remembered groups; the oldest are forgotten beyond it
OWNED_KINDS = ("Deployment", "Service", "PersistentVolumeClaim")


class Objects(Protocol):
    async def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None: ...
    async def read_secret_data(self, namespace: str, name: str) -> dict[str, str] | None: ...
    async def apply(self, manifest: dict[str, Any]) -> None: ...
    async def create_if_absent(self, manifest: dict[str, Any]) -> bool: ...
    async def delete(self, kind: str, namespace: str, name: str) -> bool: ...


class Configs(Protocol):
    async def read_config_map_key(
        self, namespace: str, name: str, key: str, *, field: str, reason_prefix: str
    ) -> str: ...


class SecretReads(Protocol):
    async def read(
        self, namespace: str, name: str, key: str, field: str, gitea_url: str
    ) -> str: ...


class Reporter(Protocol):
    async def patch_group_status(
        self, namespace: str, name: str, status: dict[str, Any]
    ) -> None: ...
    async def emit_event(
        self, group: dict[str, Any], event_type: str, reason: str, message: str
    ) -> None: ...


@dataclass
class _Memo:
    uid: str
    generation: int
    applied_at: float
    checked_at: float
    ready: bool
    config_ok: bool


class _Refused(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


def cache_status(
    *,
    group_name: str,
    namespace: str,
    deployment: dict[str, Any] | None,
    pvc: dict[str, Any] | None,
    persistent: bool,
    now: float,
) -> dict[str, Any]:
    """``status.cache`` of a group whose cache server the operator runs (pure)."""
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


class CacheServers:
    def __init__(
        self,
        objects: Objects,
        configs: Configs,
        secrets: SecretReads,
        reporter: Reporter,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        token: Callable[[], str] = lambda: pysecrets.token_hex(32),
        resync: float = RESYNC,
    ) -> None:
        self._objects = objects
        self._configs = configs
        self._secrets = secrets
        self._reporter = reporter
        self._clock = clock
        self._wall = wall_clock
        self._token = token
        self._resync = resync
        self._memo: dict[str, _Memo] = {}

    async def ensure(self, group: dict[str, Any], spec: RunnerGroupSpec) -> bool:
        """Keep the group's cache as its spec says; False while runners must not be created
        (their config Secret could not be written)."""
        meta = group["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        previous = (group.get("status") or {}).get("cache")
        if not uses_cache(spec.cache):
            self._memo.pop(key, None)
            if previous is not None:
                await self._remove(meta, keep_secret=False)
                await self._report(group, previous, None)
            return True
        memo = self._memo.get(key)
        now = self._clock()
        generation = int(meta.get("generation") or 0)
        fresh = (
            memo is not None
            and memo.uid == meta.get("uid")
            and memo.generation == generation
            and now - memo.applied_at < self._resync
        )
        if (
            fresh
            and memo is not None
            and not memo.config_ok
            and now - memo.applied_at < STATUS_EVERY
        ):
            return False  # refused a moment ago: retry soon, not on every pass
        if fresh and memo is not None and memo.config_ok:
            if memo.ready or now - memo.checked_at < STATUS_EVERY:
                return True
            status = await self._server_status(meta, spec)
            memo.checked_at, memo.ready = now, bool(status["ready"])
            await self._report(group, previous, status)
            return True
        try:
            await self._apply(meta, spec)
        except _Refused as refused:
            status = {"ready": False, "reason": refused.reason, "message": refused.message}
            self._remember(key, _Memo(str(meta.get("uid")), generation, now, now, False, False))
            await self._report(group, previous, status)
            return False
        if spec.cache is not None and spec.cache.external_server is not None:
            if previous is not None and previous.get("service"):
                await self._remove(meta, keep_secret=True)  # it ran a server before
            status = {
                "ready": True,
                "url": spec.cache.external_server.url,
                "reason": "ExternalServer",
                "message": "runners use the external cache server",
            }
        else:
            status = await self._server_status(meta, spec)
        memo = _Memo(str(meta.get("uid")), generation, now, now, bool(status["ready"]), True)
        self._remember(key, memo)
        await self._report(group, previous, status)
        return True

    def _remember(self, key: str, memo: _Memo) -> None:
        self._memo.pop(key, None)
        self._memo[key] = memo
        while len(self._memo) > MAX_GROUPS:
            del self._memo[next(iter(self._memo))]

    async def _apply(self, meta: dict[str, Any], spec: RunnerGroupSpec) -> None:
        cache = spec.cache
        assert cache is not None
        ns, name, uid = meta["namespace"], meta["name"], str(meta["uid"])
        owned = {"group_name": name, "namespace": ns, "group_uid": uid}
        secret_name = cache_object_name(name)
        try:
            if cache.external_server is not None:
                ref = cache.external_server.secret_ref
                # Like the Gitea tokens: only a Secret labelled gitea.bpg.pw/credentials=true
                # (and, if annotated, for this Gitea) is used.
                secret = await self._secrets.read(
                    ns, ref.name, ref.key, "spec.cache.externalServer", spec.gitea.url
                )
                url = cache.external_server.url
            else:
                existing = await self._objects.read_secret_data(ns, secret_name) or {}
                secret = existing.get(SECRET_KEY) or self._token()
                url = service_url(name, ns)
            user_text = None
            if spec.runner_config is not None:
                cfg = spec.runner_config.config_map_key_ref
                user_text = await self._configs.read_config_map_key(
                    ns,
                    cfg.name,
                    cfg.key,
                    field="spec.runnerConfig.configMapKeyRef",
                    reason_prefix="RunnerConfig",
                )
            values = {
                RUNNER_CONFIG_KEY: merge_runner_config(
                    user_text, server_url=url, secret=secret, offline_mode=cache.offline_mode
                )
            }
            if cache.external_server is None:
                values |= {SECRET_KEY: secret, SERVER_CONFIG_KEY: server_config(secret)}
            await self._objects.apply(render.render_secret(**owned, values=values))
            if cache.external_server is None:
                await self._objects.apply(render.render_service(**owned))
                if cache.persistent:
                    await self._objects.create_if_absent(render.render_pvc(**owned, spec=spec))
                await self._objects.apply(render.render_deployment(**owned, spec=spec))
        except (ReferenceProblem, SecretProblem) as exc:
            raise _Refused(exc.problem.reason, exc.problem.message) from None
        except RunnerConfigConflict as exc:
            raise _Refused("RunnerConfigInvalid", str(exc)) from None
        except ApiException as exc:
            if exc.status in (400, 403, 422):
                # The API server's message names the rule (RBAC, Pod Security, quota), never
                # a value of ours.
                raise _Refused("CacheRefused", api_message(exc)) from None
            raise

    async def _server_status(self, meta: dict[str, Any], spec: RunnerGroupSpec) -> dict[str, Any]:
        ns, name = meta["namespace"], meta["name"]
        obj = cache_object_name(name)
        assert spec.cache is not None
        deployment = await self._objects.read("Deployment", ns, obj)
        pvc = (
            await self._objects.read("PersistentVolumeClaim", ns, obj)
            if spec.cache.persistent
            else None
        )
        return cache_status(
            group_name=name,
            namespace=ns,
            deployment=deployment,
            pvc=pvc,
            persistent=spec.cache.persistent,
            now=self._wall(),
        )

    async def _remove(self, meta: dict[str, Any], *, keep_secret: bool) -> None:
        """The group no longer wants its cache server: delete what the operator made (owner
        references would only remove it with the group)."""
        ns, obj = meta["namespace"], cache_object_name(meta["name"])
        kinds = OWNED_KINDS if keep_secret else (*OWNED_KINDS, "Secret")
        for kind in kinds:
            try:
                await self._objects.delete(kind, ns, obj)
            except ApiException as exc:
                if exc.status != 403:
                    raise
                log.warning("may not delete cache object", kind=kind, namespace=ns, name=obj)

    async def _report(
        self,
        group: dict[str, Any],
        previous: dict[str, Any] | None,
        status: dict[str, Any] | None,
    ) -> None:
        """Write ``status.cache`` when it changed; a Warning Event when it turns bad."""
        if previous == status:
            return
        meta = group["metadata"]
        await self._reporter.patch_group_status(meta["namespace"], meta["name"], {"cache": status})
        if status is None or status.get("ready"):
            return
        reason = status.get("reason")
        if reason != "CacheServerStarting" and reason != (previous or {}).get("reason"):
            await self._reporter.emit_event(group, "Warning", str(reason), str(status["message"]))
            log.warning(
                "cache not working",
                group=f"{meta['namespace']}/{meta['name']}",
                reason=reason,
                message=status["message"],
            )
