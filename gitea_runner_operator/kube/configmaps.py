"""Reading what a RunnerGroup points at besides its tokens: ConfigMap keys, and the CA bundle
the operator must trust for the group's Gitea.

Like Secrets, these are read with ``get`` in the group's namespace, where the namespace's
owner bound the ``gitea-runner-operator-secrets`` ClusterRole; never listed or watched. Each
failure becomes a :class:`Problem` whose reason says what is wrong and whose message names the
field and the object, so it can go straight into ``Ready=False``.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.api.observation import Problem
from gitea_runner_operator.api.runnergroup import CABundleRef

CA_BUNDLE_FIELD = "spec.gitea.caBundle"
BIND_HINT = "bind the ClusterRole gitea-runner-operator-secrets in this namespace"


class ReferenceProblem(Exception):
    """A referenced ConfigMap/Secret key that cannot be used; ``problem`` says why."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


class ConfigReader:
    """One ``get`` per call; callers decide how often (e.g. once per poll)."""

    def __init__(self, api: client.ApiClient) -> None:
        # Any: the generated stubs insist on model objects and omit documented keywords.
        self._core: Any = client.CoreV1Api(api)

    async def read_config_map_key(
        self, namespace: str, name: str, key: str, *, field: str, reason_prefix: str
    ) -> str:
        """One ConfigMap value (``data``, else ``binaryData`` decoded as UTF-8).

        Reasons: ``<prefix>NotFound`` (no ConfigMap or no key), ``<prefix>Forbidden``."""
        what = f"ConfigMap {namespace}/{name}"
        try:
            cm = await self._core.read_namespaced_config_map(name, namespace)
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
        """One Secret value, for references that are not credentials (a CA bundle)."""
        what = f"Secret {namespace}/{name}"
        try:
            secret = await self._core.read_namespaced_secret(name, namespace)
        except ApiException as exc:
            raise _api_problem(exc, field, what, reason_prefix) from None
        data = secret.data or {}
        if key not in data:
            raise ReferenceProblem(
                Problem(f"{reason_prefix}NotFound", f"{field}: {what} has no key {key!r}")
            )
        return _decode(data[key], field, what, key, reason_prefix)

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
