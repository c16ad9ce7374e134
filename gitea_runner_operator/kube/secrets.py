"""Reading the tokens a RunnerGroup names, with the opt-in rules and a small cache.

Secrets may only be read one by one (`get`, never `list`/`watch`: the operator must not be
able to enumerate a namespace's Secrets), so there is no informer for them. A cache entry
lives ``ttl`` seconds so that 1,000 groups polling every 15 s do not cost 130 Secret reads a
second; the poller drops an entry at once when Gitea rejects the token (401/403), and a
missing or refused Secret is never cached, so fixing one takes effect on the next retry.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.api.credentials import CREDENTIALS_LABEL, secret_problem
from gitea_runner_operator.api.observation import Problem, ProblemKind

REQUEST_TIMEOUT = 10.0


class SecretProblem(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


@dataclass(frozen=True, slots=True)
class _Entry:
    labels: dict[str, str]
    annotations: dict[str, str]
    data: dict[str, str]
    expires: float


class Secrets:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        ttl: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._core: Any = client.CoreV1Api(api)
        self._ttl = ttl
        self._clock = clock
        self._cache: dict[tuple[str, str], _Entry] = {}
        self.reads = 0  # API reads, for tests and benchmarks

    def invalidate(self, namespace: str, name: str) -> None:
        self._cache.pop((namespace, name), None)

    def retain(self, namespaces: set[str]) -> None:
        """Drop cached Secrets of namespaces that have no group any more."""
        for key in [k for k in self._cache if k[0] not in namespaces]:
            del self._cache[key]

    async def read(self, namespace: str, name: str, key: str, field: str, gitea_url: str) -> str:
        """One decoded value of a Secret that opted in for ``gitea_url``. ``field`` (e.g.
        ``spec.authToken``) goes into errors so a user knows which reference to fix. The
        value itself is never logged."""
        entry = await self._entry(namespace, name, field)
        problem = secret_problem(
            field=field,
            namespace=namespace,
            name=name,
            labels=entry.labels,
            annotations=entry.annotations,
            gitea_url=gitea_url,
        )
        if problem is not None:
            raise SecretProblem(problem)
        where = f"{field}.secretRef: Secret {namespace}/{name}"
        if key not in entry.data:
            raise SecretProblem(
                Problem("SecretKeyMissing", f"{where} has no key {key!r}", ProblemKind.SECRET)
            )
        try:
            value = base64.b64decode(entry.data[key], validate=True).decode().strip()
        except (binascii.Error, UnicodeDecodeError):
            value = ""
        if not value:
            raise SecretProblem(
                Problem("SecretKeyMissing", f"{where}: key {key!r} is empty", ProblemKind.SECRET)
            )
        return value

    async def require_opt_in(self, namespace: str, name: str, field: str) -> None:
        """A Secret a group's template hands to runner Pods must have opted in like the
        tokens: one team's template must not mount another Secret of the namespace that was
        never lent to the operator. Only the label is looked at; no value is decoded."""
        entry = await self._entry(namespace, name, field)
        if entry.labels.get(CREDENTIALS_LABEL) != "true":
            raise SecretProblem(
                Problem(
                    "TemplateNotAllowed",
                    f"{field}: Secret {namespace}/{name} lacks the label {CREDENTIALS_LABEL}: "
                    '"true"; runner Pods get only Secrets that opt in',
                    ProblemKind.SECRET,
                )
            )

    async def _entry(self, namespace: str, name: str, field: str) -> _Entry:
        cached = self._cache.get((namespace, name))
        if cached is not None and cached.expires > self._clock():
            return cached
        where = f"{field}.secretRef: Secret {namespace}/{name}"
        try:
            self.reads += 1
            secret = await self._core.read_namespaced_secret(
                name, namespace, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as exc:
            self._cache.pop((namespace, name), None)
            if exc.status == 404:
                raise SecretProblem(
                    Problem("SecretNotFound", f"{where} not found", ProblemKind.SECRET)
                ) from None
            if exc.status == 403:
                raise SecretProblem(
                    Problem(
                        "SecretForbidden",
                        f"{where}: the operator may not read it; grant it `get` on this Secret "
                        "(bind the ClusterRole gitea-runner-operator-secrets here, or a Role like "
                        "manifests/examples/secret-access.yaml)",
                        ProblemKind.SECRET,
                    )
                ) from None
            raise
        meta = secret.metadata
        entry = _Entry(
            labels=dict(meta.labels or {}),
            annotations=dict(meta.annotations or {}),
            data=dict(secret.data or {}),
            expires=self._clock() + self._ttl,
        )
        self._cache[(namespace, name)] = entry
        return entry
