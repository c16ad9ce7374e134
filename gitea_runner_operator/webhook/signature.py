"""Gitea's webhook signature: ``X-Gitea-Signature`` is the hex HMAC-SHA256 of the raw body,
keyed with the hook's secret.

HMAC hashes a key longer than the hash's block (64 bytes for SHA-256) and uses the digest
instead (RFC 2104, section 2), so such a key and its SHA-256 sign every body alike. Keeping
the digest (:func:`hmac_key`) makes a tenant's 1 MiB secret cost 32 bytes of memory and one
short key per verification, like anyone else's."""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from typing import Final, TypeVar

SIGNATURE_HEADER: Final = "X-Gitea-Signature"
_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")

T = TypeVar("T")
BLOCK_SIZE: Final = hashlib.sha256().block_size


def hmac_key(secret: bytes) -> bytes:
    """The key HMAC-SHA256 actually uses for ``secret``: its SHA-256 when longer than a
    block, else itself. Signs and verifies exactly what ``secret`` does."""
    return hashlib.sha256(secret).digest() if len(secret) > BLOCK_SIZE else secret


def sign(secret: bytes, body: bytes) -> str:
    return hmac.new(secret, body, hashlib.sha256).hexdigest()


def parse_signature(header: str | None) -> bytes | None:
    """The raw digest of a well-formed header, else None (missing, empty or not 64 hex)."""
    if header is None:
        return None
    header = header.strip()
    if not _HEX64.match(header):
        return None
    return bytes.fromhex(header)


def matches(secret: bytes, body: bytes, digest: bytes) -> bool:
    """Constant-time: how long the comparison takes says nothing about the right digest."""
    expected = hmac.new(secret, body, hashlib.sha256).digest()
    return hmac.compare_digest(expected, digest)


def matching(candidates: Iterable[tuple[T, bytes]], body: bytes, digest: bytes) -> list[T]:
    """The tags of the candidate secrets that signed ``body``; each distinct secret is tried
    once, however many groups share it. An empty secret never matches: Gitea sends no
    signature without a secret, so an empty one would vouch for anything."""
    verdict: dict[bytes, bool] = {}
    found: list[T] = []
    for tag, secret in candidates:
        if not secret:
            continue
        if secret not in verdict:
            verdict[secret] = matches(secret, body, digest)
        if verdict[secret]:
            found.append(tag)
    return found
