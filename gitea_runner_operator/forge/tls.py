"""Which certificates the operator trusts for a group's Gitea.

Pure: a PEM bundle (from ``spec.gitea.caBundle``) in, the ``ssl`` argument for aiohttp out.
The bundle is added to the system's trust store rather than replacing it, as the runner's
``SSL_CERT_FILE`` adds to Go's system certificate directories: a Gitea behind an internal CA
and a proxy or mirror with a public certificate both keep working.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import ssl

_BEGIN = "-----BEGIN CERTIFICATE-----"
_BLOCK = re.compile(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", re.S)


class CABundleError(ValueError):
    """The bundle holds no usable certificate; the message says why, never the content."""


def ssl_context_for(pem: str | None) -> ssl.SSLContext | bool:
    """``True`` (aiohttp's default verification) without a bundle; else a verifying context
    that trusts the system's CAs and every certificate in ``pem``."""
    if pem is None:
        return True
    if _BEGIN not in pem:
        raise CABundleError("holds no PEM certificate (no '-----BEGIN CERTIFICATE-----' block)")
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    try:
        context.load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or type(exc).__name__
        raise CABundleError(f"is not valid PEM certificate data ({reason})") from None
    return context


def bundle_id(pem: str) -> str:
    """An id of the certificates a bundle holds, whatever their order, repeats, line breaks
    or the text between them: bundles that trust the same CAs share one context (each costs
    about 0.8 MB, the system's CAs included) and one HTTP session. Falls back to the text's
    hash when a block does not decode (building the context then fails anyway)."""
    ders: set[bytes] = set()
    for body in _BLOCK.findall(pem):
        try:
            ders.add(base64.b64decode("".join(body.split()), validate=True))
        except binascii.Error:
            return hashlib.sha256(pem.encode()).hexdigest()
    if not ders:
        return hashlib.sha256(pem.encode()).hexdigest()
    digest = hashlib.sha256()
    for der in sorted(ders):
        digest.update(hashlib.sha256(der).digest())
    return digest.hexdigest()
