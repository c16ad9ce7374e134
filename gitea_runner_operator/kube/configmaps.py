"""Reading what a RunnerGroup points at besides its tokens: ConfigMap keys, and the CA bundle
the operator must trust for the group's Gitea.

Like Secrets, these are read with ``get`` in the group's namespace, where the namespace's
owner bound the ``gitea-runner-operator-secrets`` ClusterRole; never listed or watched. Each
failure becomes a :class:`Problem` whose reason says what is wrong and whose message names the
field and the object, so it can go straight into ``Ready=False``.

A Secret is read through the operator's one :class:`SecretStore` (opt-in label, timeout,
cache), and whatever is wrong with one (missing, not opted in, no such key, not PEM) gives
the same answer, so a RunnerGroup cannot be used to learn which Secrets exist or what they
hold. Every read has a timeout, and one object is read at most once per ``ttl`` however many
groups name it: 1,000 groups behind one CA bundle cost one read a minute, not 67 a second.
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
from gitea_runner_operator.api.observation import Problem
from gitea_runner_operator.api.runnergroup import CABundleRef
from gitea_runner_operator.kube.http import REQUEST_TIMEOUT
from gitea_runner_operator.kube.secret_store import SecretStore, SecretUnavailable

CA_BUNDLE_FIELD = "spec.gitea.caBundle"
BIND_HINT = "bind the ClusterRole gitea-runner-operator-secrets in this namespace"
CACHE_TTL = 60.0
MAX_CACHED = 4096


class ReferenceProblem(Exception):
    """A referenced ConfigMap/Secret key that cannot be used; ``problem`` says why."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


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
    """ConfigMaps: ``get`` with a timeout, cached for ``ttl`` seconds per object (success
    only: a fixed object is seen on the next retry). Secret keys come from the store."""

    def __init__(
        self,
        api: client.ApiClient | None,
        secrets: SecretStore,
        *,
        ttl: float = CACHE_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Any: the generated stubs insist on model objects and omit documented keywords.
        self._core: Any = client.CoreV1Api(api) if api is not None else None
        self._secrets = secrets
        self._ttl = ttl
        self._clock = clock
        self._cache: dict[tuple[str, str], tuple[float, Any]] = {}
        self.reads = 0  # API reads, for tests and benchmarks

    async def _config_map(self, namespace: str, name: str) -> Any:
        """Secrets go through the :class:`SecretStore`, not here."""
        key = (namespace, name)
        cached = self._cache.get(key)
        now = self._clock()
        if cached is not None and cached[0] > now:
            return cached[1]
        self.reads += 1
        try:
            obj = await self._core.read_namespaced_config_map(
                name, namespace, _request_timeout=REQUEST_TIMEOUT
            )
        except BaseException:
            self._cache.pop(key, None)
            raise
        if len(self._cache) >= MAX_CACHED:
            for stale in [k for k, (until, _) in self._cache.items() if until <= now]:
                del self._cache[stale]
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
        self._cache[key] = (now + self._ttl, obj)
        return obj

    async def read_config_map_key(
        self, namespace: str, name: str, key: str, *, field: str, reason_prefix: str
    ) -> str:
        """One ConfigMap value (``data``, else ``binaryData`` decoded as UTF-8).

        Reasons: ``<prefix>NotFound`` (no ConfigMap or no key), ``<prefix>Forbidden``."""
        what = f"ConfigMap {namespace}/{name}"
        try:
            cm = await self._config_map(namespace, name)
        except ApiException as exc:
            raise _api_problem(exc, field, what, reason_prefix) from None
        data = cm.data or {}
        if key in data:
            return str(data[key])
        binary = cm.binary_data or {}
        if key in binary:
            return _decode(binary[key], field, what, key, reason_prefix)
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
            lent = await self._secrets.get(namespace, name)
        except SecretUnavailable as exc:
            if exc.reason == "Forbidden":
                raise ReferenceProblem(
                    Problem(
                        f"{reason_prefix}Forbidden",
                        f"{field}: the operator may not read Secret {namespace}/{name}; "
                        f"{BIND_HINT}",
                    )
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


def _api_problem(exc: ApiException, field: str, what: str, prefix: str) -> Exception:
    if exc.status == 404:
        return ReferenceProblem(Problem(f"{prefix}NotFound", f"{field}: {what} not found"))
    if exc.status == 403:
        return ReferenceProblem(
            Problem(f"{prefix}Forbidden", f"{field}: the operator may not read {what}; {BIND_HINT}")
        )
    return exc


def _decode(raw: str, field: str, what: str, key: str, prefix: str) -> str:
    try:
        return base64.b64decode(raw, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise ReferenceProblem(
            Problem(f"{prefix}Invalid", f"{field}: key {key!r} of {what} is not UTF-8 text")
        ) from None
