"""Whether a namespace is being deleted whole: what decides whether a deleting group may still
use the token of its last good answer (poll/last_good.py).

A namespace deleted whole takes the group's tokens Secret and the RoleBinding that lends it
in the same breath as the group; a tenant who revokes its token (removes the RoleBinding or
the opt-in label) while its group is deleting leaves the namespace in place. Only the
Namespace object tells the two apart: its ``deletionTimestamp`` (phase ``Terminating``).

Read with ``get`` (the operator's ClusterRole grants ``get`` on namespaces, nothing else),
within the API timeout, one read per namespace at a time and the answer kept for
``CACHE_TTL`` seconds. Anything but a clear answer (a refusal by RBAC, an error, a timeout)
reads as *not* being deleted: a token is never used on a guess.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.kit.lograte import LogRate
from gitea_runner_operator.kit.singleflight import SingleFlight
from gitea_runner_operator.kit.ttlcache import TTLCache
from gitea_runner_operator.kube.http import REQUEST_TIMEOUT

log = structlog.get_logger(__name__)

CACHE_TTL = 5.0
MAX_CACHED = 4096
LOG_EVERY = 300.0


class NamespaceReader:
    """``deleting(namespace)``: whether the namespace is being deleted, or gone."""

    def __init__(
        self, api: client.ApiClient | None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        # Any: the generated stubs insist on model objects and omit documented keywords.
        self._core: Any = client.CoreV1Api(api) if api is not None else None
        self._cache: TTLCache[str, bool] = TTLCache(CACHE_TTL, max_entries=MAX_CACHED, clock=clock)
        self._flights: SingleFlight[str, bool] = SingleFlight()
        self._log = LogRate(LOG_EVERY, clock=clock)
        self.reads = 0  # API reads, for tests

    async def deleting(self, namespace: str) -> bool:
        kept = self._cache.entry(namespace)
        if kept is not None:
            return kept.value
        return await self._flights.run(namespace, lambda: self._read(namespace))

    async def _read(self, namespace: str) -> bool:
        if self._core is None:
            return False
        self.reads += 1
        try:
            ns = await self._core.read_namespace(namespace, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                answer = True  # gone already: deleted whole
            else:
                self._say(namespace, f"HTTP {exc.status}")
                return False
        except Exception as exc:  # a timeout, a reset: no answer is not a yes
            self._say(namespace, type(exc).__name__)
            return False
        else:
            meta = getattr(ns, "metadata", None)
            status = getattr(ns, "status", None)
            answer = getattr(meta, "deletion_timestamp", None) is not None or (
                getattr(status, "phase", None) == "Terminating"
            )
        self._cache.put(namespace, answer)
        return answer

    def _say(self, namespace: str, error: str) -> None:
        if self._log.admit(("namespace", error)) is not None:
            log.warning(
                "cannot tell whether a namespace is being deleted; a deleting group there "
                "will not reuse a token it can no longer read",
                namespace=namespace,
                error=error,
            )
