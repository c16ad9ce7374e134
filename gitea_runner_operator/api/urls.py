"""The http(s) URL rule of every URL a RunnerGroup gives (its Gitea, an external cache
server): written once so the two cannot drift apart."""

from __future__ import annotations

from urllib.parse import urlsplit


def http_url(value: str, *, credentials_hint: str) -> str:
    """``value`` without a trailing slash, if it is an http(s) URL with a host and neither
    credentials, a query nor a fragment; else ValueError (for pydantic). Credentials are
    checked first and never echoed: in a URL they would travel by value into every runner
    Job's env, the status, Events and logs. ``credentials_hint`` says where they go instead."""
    parts = urlsplit(value)
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"must not carry credentials (user:password@); {credentials_hint}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http(s) URL with a host")
    if parts.query or parts.fragment:
        raise ValueError(f"{value!r} must not carry a query or fragment")
    return value.rstrip("/")
