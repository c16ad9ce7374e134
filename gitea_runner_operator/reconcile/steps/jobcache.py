"""The ensure step of ``spec.cache``: keep a group's cache server and its runners' config.

Run by the reconciler on every pass. Every ``resync`` seconds (at once when the group's
spec changed) it reads what the objects are made from besides the spec (the runnerConfig
ConfigMap and an external server's Secret, both cached by their readers) and compares their
fingerprint with the one last applied; it writes only when that changed, or after a slow,
jittered ``drift_resync`` that puts hand edits back. So a quiet group costs no write and
no read of its own objects between those (1,000 quiet groups: about 1 write/s instead of
33). The runner config Secret must exist before a runner Pod can mount it, so
:meth:`CacheServers.ensure` says whether runners may be created.

Writes and deletes go through :class:`OwnedWrites`, which touches only what the operator
made for the group.

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

from gitea_runner_operator.api.cache import RunnerConfigConflict, cache_object_name, uses_cache
from gitea_runner_operator.api.naming import GroupKey
from gitea_runner_operator.api.observation import ProblemError
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.kit.backoff import jittered
from gitea_runner_operator.kit.lru import LRU
from gitea_runner_operator.reconcile.jobcache_plan import cache_status, fingerprint
from gitea_runner_operator.reconcile.status.parts import NOTHING, Part, cache_part
from gitea_runner_operator.reconcile.steps.jobcache_writes import CacheRefusal, Objects, OwnedWrites

log = structlog.get_logger(__name__)

RESYNC = 120.0  # seconds between checks of an unchanged group's inputs
DRIFT_RESYNC = 3600.0  # an unchanged group is re-applied after 75-100 % of this
STATUS_EVERY = 15.0  # seconds between status reads while the server is not ready
MAX_GROUPS = 10_000  # remembered groups; the oldest are forgotten beyond it


class Configs(Protocol):
    async def read_config_map_key(
        self, namespace: str, name: str, key: str, *, field: str, reason_prefix: str
    ) -> str: ...


class SecretReads(Protocol):
    async def read(
        self, namespace: str, name: str, key: str, field: str, gitea_url: str
    ) -> str: ...


@dataclass
class _Memo:
    uid: str
    generation: int
    checked_at: float  # when the inputs were last read
    status_at: float  # when the server's status was last read
    ready: bool
    config_ok: bool
    digest: str = ""  # the fingerprint last applied
    resync_at: float = 0.0  # when the objects are re-applied even if nothing changed


_RANDOM = pysecrets.SystemRandom()


class CacheServers:
    def __init__(
        self,
        objects: Objects,
        configs: Configs,
        secrets: SecretReads,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        token: Callable[[], str] = lambda: pysecrets.token_hex(32),
        resync: float = RESYNC,
        drift_resync: float = DRIFT_RESYNC,
        jitter: Callable[[], float] = _RANDOM.random,
    ) -> None:
        self._objects = objects
        self._writes = OwnedWrites(objects)
        self._configs = configs
        self._secrets = secrets
        self._clock = clock
        self._wall = wall_clock
        self._token = token
        self._resync = resync
        self._drift = drift_resync
        self._jitter = jitter
        self._memo: LRU[str, _Memo] = LRU(MAX_GROUPS)
        # key -> (uid, the latest status.cache found for it; None: the field goes)
        self._found: LRU[str, tuple[str, dict[str, Any] | None]] = LRU(MAX_GROUPS)

    def part(self, group: dict[str, Any]) -> Part:
        """``status.cache`` for the pass to write (nothing: this process found none yet)."""
        found = self._found.peek(str(GroupKey.of(group)))
        if found is None or found[0] != str(group["metadata"].get("uid")):
            return NOTHING
        return cache_part(group.get("status") or {}, found[1])

    def settling(self, key: str) -> bool:
        """Whether the group's cache server is not ready yet: nothing else queues a reconcile
        when it turns ready (no watch on its Deployment), so the pass must come back to read
        it (every STATUS_EVERY) until it is."""
        memo = self._memo.peek(key)
        return memo is not None and not memo.ready

    async def ensure(self, group: dict[str, Any], spec: RunnerGroupSpec) -> bool:
        """Keep the group's cache as its spec says; False while runners must not be created
        (their config Secret could not be written)."""
        meta = group["metadata"]
        key = str(GroupKey.of(group))
        previous = (group.get("status") or {}).get("cache")
        if not uses_cache(spec.cache):
            self._memo.pop(key)
            if previous is None:
                self._found.pop(key)  # the status shows no cache: nothing left to write
            elif self._found.peek(key) != (str(meta.get("uid")), None):
                # Removed once: the passes before the status shows it remove nothing again.
                await self._writes.remove(meta, keep_secret=False)
                self._report(group, previous, None)
            return True
        now = self._clock()
        uid, generation = str(meta.get("uid")), int(meta.get("generation") or 0)
        memo = self._memo.peek(key)
        if memo is not None and memo.uid != uid:
            memo = None
        if memo is not None and memo.generation == generation:
            if now - memo.checked_at < self._resync and memo.config_ok:
                return await self._refresh(group, spec, memo, previous, now)
            if not memo.config_ok and now - memo.checked_at < STATUS_EVERY:
                return False  # refused a moment ago: retry soon, not on every pass
        try:
            user_config, external_secret = await self._inputs(meta, spec)
            digest = fingerprint(
                meta, spec, user_config=user_config, external_secret=external_secret
            )
            unchanged = memo is not None and memo.config_ok and memo.digest == digest
            if unchanged and memo is not None and now < memo.resync_at:
                memo.generation, memo.checked_at = generation, now
                return await self._refresh(group, spec, memo, previous, now)
            await self._writes.apply(meta, spec, user_config, external_secret, self._token)
        except ProblemError as exc:  # a ConfigMap or Secret the cache names
            refused = CacheRefusal(exc.problem.reason, exc.problem.message)
        except RunnerConfigConflict as exc:
            refused = CacheRefusal("RunnerConfigInvalid", str(exc))
        except CacheRefusal as exc:
            refused = exc
        else:
            return await self._applied(group, spec, previous, generation, digest, now)
        status = {"ready": False, "reason": refused.reason, "message": refused.message}
        return await self._settle(
            group, previous, status, _Memo(uid, generation, now, now, False, False)
        )

    async def _applied(
        self,
        group: dict[str, Any],
        spec: RunnerGroupSpec,
        previous: dict[str, Any] | None,
        generation: int,
        digest: str,
        now: float,
    ) -> bool:
        meta = group["metadata"]
        if spec.cache is not None and spec.cache.external_server is not None:
            if previous is not None and previous.get("service"):
                await self._writes.remove(meta, keep_secret=True)  # it ran a server before
            status = {
                "ready": True,
                "url": spec.cache.external_server.url,
                "reason": "ExternalServer",
                "message": "runners use the external cache server",
            }
        else:
            status = await self._server_status(meta, spec)
        resync_at = now + jittered(self._drift, 1.0, 0.75, self._jitter)
        memo = _Memo(
            str(meta.get("uid")),
            generation,
            now,
            now,
            bool(status["ready"]),
            True,
            digest,
            resync_at,
        )
        return await self._settle(group, previous, status, memo)

    async def _refresh(
        self,
        group: dict[str, Any],
        spec: RunnerGroupSpec,
        memo: _Memo,
        previous: dict[str, Any] | None,
        now: float,
    ) -> bool:
        """Nothing to write: read the server's status while it is not ready yet."""
        if memo.ready or now - memo.status_at < STATUS_EVERY:
            return True
        status = await self._server_status(group["metadata"], spec)
        memo.status_at, memo.ready = now, bool(status["ready"])
        self._report(group, previous, status)
        return True

    async def _settle(
        self,
        group: dict[str, Any],
        previous: dict[str, Any] | None,
        status: dict[str, Any],
        memo: _Memo,
    ) -> bool:
        """Remember what this pass found and report it; True when runners may start (their
        config Secret is written)."""
        self._remember(str(GroupKey.of(group)), memo)
        self._report(group, previous, status)
        return memo.config_ok

    def _remember(self, key: str, memo: _Memo) -> None:
        self._memo.put(key, memo)

    async def _inputs(
        self, meta: dict[str, Any], spec: RunnerGroupSpec
    ) -> tuple[str | None, str | None]:
        """What the objects are made of besides the spec: the user's runner config text and
        an external server's secret (both through their readers' caches)."""
        cache = spec.cache
        assert cache is not None
        ns = meta["namespace"]
        external_secret = None
        if cache.external_server is not None:
            ref = cache.external_server.secret_ref
            # Like the Gitea tokens: only a Secret labelled gitea.bpg.pw/credentials=true
            # (and, if annotated, for this Gitea) is used.
            external_secret = await self._secrets.read(
                ns, ref.name, ref.key, "spec.cache.externalServer", spec.gitea.url
            )
        user_config = None
        if spec.runner_config is not None:
            cfg = spec.runner_config.config_map_key_ref
            user_config = await self._configs.read_config_map_key(
                ns,
                cfg.name,
                cfg.key,
                field="spec.runnerConfig.configMapKeyRef",
                reason_prefix="RunnerConfig",
            )
        return user_config, external_secret

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

    def _report(
        self,
        group: dict[str, Any],
        previous: dict[str, Any] | None,
        status: dict[str, Any] | None,
    ) -> None:
        """Keep ``status.cache`` for the pass to write; log when it turns bad."""
        key, uid = str(GroupKey.of(group)), str(group["metadata"].get("uid"))
        last = self._found.peek(key)
        before = last[1] if last is not None and last[0] == uid else previous
        self._found.put(key, (uid, status))
        if status is None or status.get("ready") or before == status:
            return
        reason = status.get("reason")
        if reason != "CacheServerStarting" and reason != (before or {}).get("reason"):
            log.warning("cache not working", group=key, reason=reason, message=status["message"])
