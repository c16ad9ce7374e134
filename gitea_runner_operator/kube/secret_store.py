"""The one place the operator reads a tenant's Secret.

Tokens, webhook secrets, a CA bundle's ``secretKeyRef`` and the Secrets a template mounts are
all read here, so every read gets the same three things:

- **the opt-in rule**: a Secret without the label ``gitea.bpg.pw/credentials: "true"`` is
  answered as :class:`SecretUnavailable` and its data is dropped at once, never cached or
  handed on; a RunnerGroup cannot make the operator use, or tell apart, a Secret its namespace
  never lent;
- **a timeout** on the GET (an API server that stalls costs one poll, not a wedged task);
- **a cache**: one GET per Secret per ``ttl`` however many groups and deliveries name it, and
  concurrent readers of one Secret share one GET. Answers that a user fixes by hand (missing,
  refused by RBAC, not opted in) are remembered only ``negative_ttl`` seconds, so a fix shows
  on the next retry while a group naming a missing Secret cannot turn each poll into a GET.
  It keeps only the keys asked for (a template's Secrets are checked for the label with no
  key: none of their data is kept) and the operator's own annotations, drops expired answers
  as it goes, and is bounded in entries and in bytes.

Why not an informer: the operator must not be able to list or watch Secrets (it holds ``get``
only, granted per namespace), so the cache is by time, not by resourceVersion. 1,000 groups
behind one Secret cost one read a minute.

The operator's own Secrets (runner registrations, cache-server secrets) are written and read
by the modules that own them; they are not tenants' input and do not pass through here.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.api import constants
from gitea_runner_operator.api.credentials import not_opted_in, opted_in
from gitea_runner_operator.kit.singleflight import SingleFlight
from gitea_runner_operator.kit.ttlcache import TTLCache
from gitea_runner_operator.kube.http import REQUEST_TIMEOUT
from gitea_runner_operator.settings import SECRETS_ROLE

CACHE_TTL = 60.0
NEGATIVE_TTL = 5.0
MAX_ENTRIES = 4096
# Bytes of kept keys, values and annotations: tokens are small, a CA bundle some KiB; a
# value larger than the whole bound is answered but not kept.
MAX_BYTES = 8 * 1024 * 1024
_ENTRY_OVERHEAD = 256  # bytes counted per entry besides its strings

Unavailability = Literal["NotFound", "Forbidden", "NotOptedIn"]


def may_not_read(what: str, role: str) -> str:
    """The one answer to a read that RBAC refused: what to bind, by the name it really has."""
    return (
        f"the operator may not read {what}; grant it `get` there: bind the ClusterRole "
        f"{role} in that namespace, or a Role like manifests/examples/secret-access.yaml"
    )


class SecretUnavailable(Exception):
    """The Secret cannot be used, for a reason the user must fix. Callers turn ``reason``
    into their own message, naming the field that points at the Secret."""

    def __init__(self, namespace: str, name: str, reason: Unavailability) -> None:
        super().__init__(f"Secret {namespace}/{name}: {reason}")
        self.namespace = namespace
        self.name = name
        self.reason: Unavailability = reason


@dataclass(frozen=True, slots=True)
class LentSecret:
    """What the operator keeps of a Secret that opted in. ``data`` holds the API's base64
    text; :meth:`decoded` is the only way to a value, so nobody logs one by accident."""

    namespace: str
    name: str
    annotations: Mapping[str, str] = field(repr=False)
    data: Mapping[str, str] = field(repr=False)

    def decoded(self, key: str) -> bytes | None:
        """The value under ``key``, or None when there is no such key or it is not base64."""
        raw = self.data.get(key)
        if raw is None:
            return None
        try:
            return base64.b64decode(raw, validate=True)
        except binascii.Error:
            return None


_Answer = LentSecret | SecretUnavailable


@dataclass(frozen=True, slots=True)
class _Entry:
    answer: _Answer  # a LentSecret holds only the values of ``keys`` (those present)
    keys: frozenset[str]


def _kept(answer: _Answer, keys: frozenset[str]) -> _Answer:
    """What is remembered of an answer: the keys asked for, the operator's annotations."""
    if isinstance(answer, SecretUnavailable):
        return answer
    prefix = f"{constants.GROUP}/"
    return LentSecret(
        answer.namespace,
        answer.name,
        annotations={k: v for k, v in answer.annotations.items() if k.startswith(prefix)},
        data={k: v for k, v in answer.data.items() if k in keys},
    )


def _size(answer: _Answer) -> int:
    size = _ENTRY_OVERHEAD + len(answer.namespace) + len(answer.name)
    if isinstance(answer, LentSecret):
        for mapping in (answer.annotations, answer.data):
            size += sum(len(k) + len(v) for k, v in mapping.items())
    return size


class SecretStore:
    def __init__(
        self,
        api: client.ApiClient | None,
        *,
        ttl: float = CACHE_TTL,
        negative_ttl: float = NEGATIVE_TTL,
        max_entries: int = MAX_ENTRIES,
        max_bytes: int = MAX_BYTES,
        clock: Callable[[], float] = time.monotonic,
        role: str = SECRETS_ROLE,
    ) -> None:
        self.role = role
        # Any: the generated stubs omit the documented ``_request_timeout`` keyword.
        self._core: Any = client.CoreV1Api(api) if api is not None else None
        self._ttl = ttl
        self._negative_ttl = negative_ttl
        # Expired answers are swept at most once per ``negative_ttl``: memory follows the
        # Secrets in use, not the most ever named.
        self._answers: TTLCache[tuple[str, str], _Entry] = TTLCache(
            ttl,
            max_entries=max_entries,
            max_bytes=max_bytes,
            sweep_every=negative_ttl,
            clock=clock,
        )
        self._reads: SingleFlight[tuple[str, str], _Answer] = SingleFlight()
        # Keys asked for while a read is out: what it will keep.
        self._wanted: dict[tuple[str, str], set[str]] = {}
        # Bumped by invalidate(): a read that began before must not store what it found.
        self._epoch = 0
        self.reads = 0  # GETs sent, for tests and benchmarks

    def __len__(self) -> int:
        return len(self._answers)

    def refused(self, what: str) -> str:
        """The message for a read of ``what`` that RBAC refused (:func:`may_not_read`)."""
        return may_not_read(what, self.role)

    def why_unavailable(self, exc: SecretUnavailable) -> str:
        """The one sentence for each way a Secret cannot be used; callers put the field that
        names the Secret in front, and may add advice of their own."""
        if exc.reason == "Forbidden":
            return self.refused(f"Secret {exc.namespace}/{exc.name}")
        if exc.reason == "NotFound":
            return f"Secret {exc.namespace}/{exc.name} not found"
        return not_opted_in(exc.namespace, exc.name)

    @property
    def bytes(self) -> int:
        """What the kept answers weigh, as counted against ``max_bytes``."""
        return self._answers.bytes

    async def get(self, namespace: str, name: str, key: str | None = None) -> LentSecret:
        """The Secret, if it opted in, with the value of ``key`` (None: only whether it may
        be used; no value is handed out or kept). Raises :class:`SecretUnavailable` for what
        a user must fix, and lets any other failure (a timeout, a 5xx) through uncached."""
        where = (namespace, name)
        entry = self._answers.get(where)
        if entry is not None and (
            key is None or key in entry.keys or isinstance(entry.answer, SecretUnavailable)
        ):
            return _unwrap(entry.answer, key)
        # A read for a new key keeps the keys already in use too.
        wanted = self._wanted.setdefault(where, set(entry.keys if entry is not None else ()))
        if key is not None:
            wanted.add(key)
        answer = await self._reads.run(
            where,
            lambda: self._read(namespace, name),
            settled=lambda: self._wanted.pop(where, None),
        )
        return _unwrap(answer, key)

    def invalidate(self, namespace: str, name: str) -> None:
        """Forget one answer (Gitea just refused the token it held: read it afresh). A read
        already under way still answers its callers but is not remembered, and the next
        caller starts a new one."""
        self._answers.pop((namespace, name))
        self._reads.forget((namespace, name))
        self._wanted.pop((namespace, name), None)
        self._epoch += 1

    def retain(self, namespaces: set[str]) -> None:
        """Forget the Secrets of namespaces that have no group any more."""
        self._answers.retain(lambda key: key[0] in namespaces)

    async def _read(self, namespace: str, name: str) -> _Answer:
        self.reads += 1
        epoch = self._epoch
        answer: _Answer
        try:
            secret = await self._core.read_namespaced_secret(
                name, namespace, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as exc:
            if exc.status not in (403, 404):
                self._answers.pop((namespace, name))
                raise
            reason: Unavailability = "NotFound" if exc.status == 404 else "Forbidden"
            answer = SecretUnavailable(namespace, name, reason)
        else:
            meta = secret.metadata
            labels = (getattr(meta, "labels", None) or {}) if meta is not None else {}
            if opted_in(labels):
                answer = LentSecret(
                    namespace,
                    name,
                    annotations=dict(getattr(meta, "annotations", None) or {}),
                    data=dict(secret.data or {}),
                )
            else:
                answer = SecretUnavailable(namespace, name, "NotOptedIn")
        if epoch == self._epoch:
            ttl = self._ttl if isinstance(answer, LentSecret) else self._negative_ttl
            keys = frozenset(self._wanted.get((namespace, name), ()))
            kept = _kept(answer, keys)
            self._answers.put((namespace, name), _Entry(kept, keys), ttl=ttl, size=_size(kept))
        return answer  # whole, to the callers waiting on this read only


def _unwrap(answer: _Answer, key: str | None) -> LentSecret:
    """One caller's answer: the value of ``key`` only."""
    if isinstance(answer, SecretUnavailable):
        # A fresh exception per caller: tracebacks of concurrent readers must not chain.
        raise SecretUnavailable(answer.namespace, answer.name, answer.reason)
    data = {key: answer.data[key]} if key is not None and key in answer.data else {}
    return LentSecret(answer.namespace, answer.name, answer.annotations, data)
