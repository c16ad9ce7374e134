"""Reading what a RunnerGroup points at besides its tokens: ConfigMap keys, and the CA bundle
the operator must trust for the group's Gitea.

Like Secrets, these are read with ``get`` in the group's namespace, where the namespace's
owner bound the operator's Secrets ClusterRole (``--secrets-cluster-role``); never listed or
watched. Each failure becomes a :class:`Problem` whose reason says what is wrong and whose
message names the field and the object, so it can go straight into ``Ready=False``.

A Secret is read through the operator's one :class:`SecretStore` (opt-in label, timeout,
cache), and whatever is wrong with one (missing, not opted in, no such key, not PEM) gives
the same answer, so a RunnerGroup cannot be used to learn which Secrets exist or what they
hold. Every read has a timeout, and one object is read at most once per ``ttl`` however many
groups name it: 1,000 groups behind one CA bundle cost one read a minute, not 67 a second.
Only the values of the keys that are used are kept, within a byte bound, never the whole
ConfigMap.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.api.credentials import CREDENTIALS_LABEL
from gitea_runner_operator.api.observation import Problem, ProblemError
from gitea_runner_operator.api.refs import CABundleRef
from gitea_runner_operator.kit.ttlcache import TTLCache
from gitea_runner_operator.kube.http import REQUEST_TIMEOUT
from gitea_runner_operator.kube.secret_store import SecretStore, SecretUnavailable

CA_BUNDLE_FIELD = "spec.gitea.caBundle"
CACHE_TTL = 60.0
MAX_CACHED = 4096
MAX_CACHED_BYTES = 8 * 1024 * 1024  # of kept values; a larger value is not kept


class ReferenceProblem(ProblemError):
    """A referenced ConfigMap/Secret key that cannot be used; ``problem`` says why."""


def unusable_secret(field: str, namespace: str, name: str, key: str) -> ReferenceProblem:
    """One answer for every way a Secret cannot serve as a CA bundle."""
    return ReferenceProblem(
        Problem(
            "CABundleUnusable",
            f"{field}: Secret {namespace}/{name} cannot be used: it must exist, carry the label "
            f'{CREDENTIALS_LABEL}: "true" and hold PEM certificates under key {key!r}',
        )
    )


class ConfigReader:
    """ConfigMaps: ``get`` with a timeout; the values of the keys used are kept for ``ttl``
    seconds per object (success only: a fixed object is seen on the next retry). Secret keys
    come from the store."""

    def __init__(
        self,
        api: client.ApiClient | None,
        secrets: SecretStore,
        *,
        ttl: float = CACHE_TTL,
        max_bytes: int = MAX_CACHED_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Any: the generated stubs insist on model objects and omit documented keywords.
        self._core: Any = client.CoreV1Api(api) if api is not None else None
        self._secrets = secrets
        # The values of the keys asked for (None: no such key, a Problem: not UTF-8 text).
        self._cache: TTLCache[tuple[str, str], dict[str, str | Problem | None]] = TTLCache(
            ttl, max_entries=MAX_CACHED, max_bytes=max_bytes, clock=clock
        )
        self.reads = 0  # API reads, for tests and benchmarks

    @property
    def bytes(self) -> int:
        """The bytes of the kept keys and values."""
        return self._cache.bytes

    async def _value(self, namespace: str, name: str, key: str) -> str | Problem | None:
        """One key of a ConfigMap, through the cache (Secrets go through the store)."""
        where = (namespace, name)
        kept = self._cache.get(where)
        if kept is not None and key in kept:
            return kept[key]
        self.reads += 1
        try:
            cm = await self._core.read_namespaced_config_map(
                name, namespace, _request_timeout=REQUEST_TIMEOUT
            )
        except BaseException:
            self._cache.pop(where)
            raise
        keys = {key, *(kept if kept is not None else ())}
        values = {k: _pick(cm, k) for k in keys}
        size = sum(len(k) + len(v) for k, v in values.items() if isinstance(v, str))
        self._cache.put(where, values, size=size + len(namespace) + len(name) + 128)
        return values[key]

    async def read_config_map_key(
        self, namespace: str, name: str, key: str, *, field: str, reason_prefix: str
    ) -> str:
        """One ConfigMap value (``data``, else ``binaryData`` decoded as UTF-8).

        Reasons: ``<prefix>NotFound`` (no ConfigMap or no key), ``<prefix>Forbidden``,
        ``<prefix>Invalid`` (not UTF-8 text)."""
        what = f"ConfigMap {namespace}/{name}"
        try:
            value = await self._value(namespace, name, key)
        except ApiException as exc:
            raise _api_problem(exc, field, what, reason_prefix, self._secrets) from None
        if isinstance(value, str):
            return value
        if isinstance(value, Problem):
            raise ReferenceProblem(
                Problem(
                    f"{reason_prefix}Invalid", f"{field}: key {key!r} of {what} {value.message}"
                )
            )
        raise ReferenceProblem(
            Problem(f"{reason_prefix}NotFound", f"{field}: {what} has no key {key!r}")
        )

    async def read_secret_key(
        self, namespace: str, name: str, key: str, *, field: str, reason_prefix: str
    ) -> str:
        """One value of a Secret that opted in, for references that are not credentials (a
        CA bundle), read through the operator's one Secret reader. Every failure but a
        refusal by RBAC gives the same answer."""
        try:
            lent = await self._secrets.get(namespace, name, key)
        except SecretUnavailable as exc:
            if exc.reason == "Forbidden":
                refused = self._secrets.why_unavailable(exc)
                raise ReferenceProblem(
                    Problem(f"{reason_prefix}Forbidden", f"{field}: {refused}")
                ) from None
            raise unusable_secret(field, namespace, name, key) from None
        raw = lent.decoded(key)
        try:
            if raw is not None:
                return raw.decode()
        except UnicodeDecodeError:
            pass
        raise unusable_secret(field, namespace, name, key)

    async def read_ca_bundle(self, namespace: str, bundle: CABundleRef) -> str:
        """The PEM text of ``spec.gitea.caBundle``; CABundleNotFound/CABundleForbidden."""
        ref = bundle.ref
        read = (
            self.read_config_map_key
            if bundle.config_map_key_ref is not None
            else self.read_secret_key
        )
        which = "configMapKeyRef" if bundle.config_map_key_ref is not None else "secretKeyRef"
        field = f"{CA_BUNDLE_FIELD}.{which}"
        return await read(namespace, ref.name, ref.key, field=field, reason_prefix="CABundle")


def _api_problem(
    exc: ApiException, field: str, what: str, prefix: str, secrets: SecretStore
) -> Exception:
    if exc.status == 404:
        return ReferenceProblem(Problem(f"{prefix}NotFound", f"{field}: {what} not found"))
    if exc.status == 403:
        return ReferenceProblem(Problem(f"{prefix}Forbidden", f"{field}: {secrets.refused(what)}"))
    return exc


def _pick(cm: Any, key: str) -> str | Problem | None:
    """``data[key]``, else ``binaryData[key]`` decoded; None when the key is not there."""
    data = cm.data or {}
    if key in data:
        return str(data[key])
    binary = cm.binary_data or {}
    if key not in binary:
        return None
    try:
        return base64.b64decode(binary[key], validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return Problem("Invalid", "is not UTF-8 text")
