"""Where webhook secrets come from: the operator-wide one (read once at start) and the per-group
ones (read on demand through a provider the caller may replace with its own cache).

Every Secret the operator reads for a webhook must carry the label
``gitea.bpg.pw/credentials: "true"``: a team marks the Secrets it lends to the operator, so a
RunnerGroup cannot name some other Secret of its namespace and have the operator use it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

import structlog
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.kit.ttlcache import TTLCache
from gitea_runner_operator.kube.secret_store import LentSecret, SecretStore, SecretUnavailable
from gitea_runner_operator.webhook.routing import SecretLocation
from gitea_runner_operator.webhook.signature import BLOCK_SIZE, hmac_key

log = structlog.get_logger(__name__)

# Webhook secret answers remembered at most (groups come and go; the oldest go first), and
# their bytes: each is kept as its HMAC key (signature.hmac_key), at most 64 bytes.
MAX_REMEMBERED: Final = 4096
MAX_REMEMBERED_BYTES: Final = MAX_REMEMBERED * BLOCK_SIZE

DEFAULT_KEY: Final = "webhook-secret"

# Given where a group's hook secret lives, its value (None: unusable; the reason is logged).
SecretProvider = Callable[[SecretLocation], Awaitable[bytes | None]]


class WebhookSecretError(ValueError):
    """The operator-wide secret cannot be used; the message says which flag or object."""


def parse_secret_location(value: str, flag: str = "--webhook-secret") -> SecretLocation:
    """``NAMESPACE/NAME[:KEY]`` (key default ``webhook-secret``)."""
    ref, _, key = value.partition(":")
    namespace, slash, name = ref.partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise WebhookSecretError(f"{flag}: {value!r} is not NAMESPACE/NAME[:KEY]")
    return SecretLocation(namespace, name, key or DEFAULT_KEY)


def decode_secret(lent: LentSecret, where: SecretLocation) -> bytes:
    """The value of ``where.key`` in a Secret that opted in, white space trimmed. Raises
    :class:`WebhookSecretError` naming what is wrong."""
    what = f"Secret {where.namespace}/{where.name}"
    if where.key not in lent.data:
        raise WebhookSecretError(f"{what} has no key {where.key!r}")
    value = (lent.decoded(where.key) or b"").strip()
    if not value:
        raise WebhookSecretError(f"key {where.key!r} of {what} is empty")
    return value


async def read_secret(store: SecretStore, where: SecretLocation) -> bytes:
    """The secret through the operator's one Secret reader; every failure becomes a
    :class:`WebhookSecretError`."""
    what = f"Secret {where.namespace}/{where.name}"
    try:
        lent = await store.get(where.namespace, where.name, where.key)
    except SecretUnavailable as exc:
        raise WebhookSecretError(store.why_unavailable(exc)) from None
    except ApiException as exc:
        raise WebhookSecretError(f"reading {what} failed: HTTP {exc.status}") from None
    return decode_secret(lent, where)


def read_secret_file(path: str | Path, flag: str = "--webhook-secret-file") -> bytes:
    """A secret from a file (a mounted Secret volume) that ``flag`` names; white space
    trimmed."""
    try:
        value = Path(path).read_bytes().strip()
    except OSError as exc:
        raise WebhookSecretError(f"{flag}: cannot read {path}: {exc}") from None
    if not value:
        raise WebhookSecretError(f"{flag}: {path} is empty")
    return value


def _reader(store: SecretStore) -> Callable[[SecretLocation], Awaitable[bytes]]:
    async def read(where: SecretLocation) -> bytes:
        return await read_secret(store, where)

    return read


class CachedSecretReader:
    """A :data:`SecretProvider` over the Kubernetes API that remembers each answer (a value or
    "unusable") for ``ttl`` seconds, so a burst of deliveries costs one Secret GET per secret.
    A rotated secret is picked up within ``ttl``; until then Gitea's deliveries get 401 and
    polling carries on as before. It answers, and keeps, each secret's HMAC key
    (:func:`~.signature.hmac_key`): what verifies a signature, in at most 64 bytes."""

    def __init__(
        self,
        store: SecretStore | None,
        ttl: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        read: Callable[[SecretLocation], Awaitable[bytes]] | None = None,
    ) -> None:
        if read is None:
            if store is None:
                raise TypeError("CachedSecretReader needs a store or a read function")
            read = _reader(store)
        self._read = read
        # Groups come and go: the oldest answers are forgotten beyond MAX_REMEMBERED.
        self._cache: TTLCache[SecretLocation, bytes | None] = TTLCache(
            ttl, max_entries=MAX_REMEMBERED, max_bytes=MAX_REMEMBERED_BYTES, clock=clock
        )

    def at_hand(self, where: SecretLocation) -> bytes | None:
        """The key kept for ``where`` while it is fresh, else None (unknown, expired, or
        unusable: :meth:`__call__` then answers, reading if need be)."""
        return self._cache.get(where)

    async def __call__(self, where: SecretLocation) -> bytes | None:
        hit = self._cache.entry(where)
        if hit is not None:
            return hit.value
        value: bytes | None
        try:
            value = hmac_key(await self._read(where))
        except WebhookSecretError as exc:
            log.warning("webhook secret unusable", secret=str(where), reason=str(exc))
            value = None
        except Exception as exc:  # the API server unreachable, a timeout: try again next time
            log.warning("webhook secret not read", secret=str(where), error=type(exc).__name__)
            last = self._cache.peek(where)  # the last answer, however old
            return last.value if last is not None else None
        self._cache.put(where, value, size=len(value or b""))
        return value
