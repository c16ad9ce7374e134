"""One JSON request over urllib, and polling until something holds (stdlib only).

Why: the Kubernetes and Gitea helpers differ only in base URL, authorization and TLS; the
request, the error they raise and the waiting are the same and live here once.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any


class ApiError(RuntimeError):
    """An API call answered with an HTTP error; ``status`` and ``body`` tell which."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path} -> HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


def request_json(
    method: str,
    base: str,
    path: str,
    *,
    error: type[ApiError],
    body: Any = None,
    query: dict[str, Any] | None = None,
    authorization: str | None = None,
    content_type: str = "application/json",
    context: ssl.SSLContext | None = None,
    timeout: float = 30.0,
) -> Any:
    """Send one request to ``base + path``; return the decoded JSON body, or None if empty."""
    url = base + path
    if query:
        url += "?" + urllib.parse.urlencode(query, doseq=True)
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", content_type)
    if authorization:
        req.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(req, context=context, timeout=timeout) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as e:
        raise error(method, path, e.code, e.read().decode(errors="replace")) from None
    return json.loads(raw) if raw else None


def wait_for(
    predicate: Callable[[], Any],
    timeout: float = 60.0,
    interval: float = 0.25,
    what: str = "condition",
) -> Any:
    """Poll ``predicate`` until it returns a truthy value; raise TimeoutError with ``what``.

    Exceptions from the predicate count as "not yet" (peers are still starting),
    and the last one is chained into the TimeoutError.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:
            last_exc = e
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}") from last_exc
        time.sleep(interval)
