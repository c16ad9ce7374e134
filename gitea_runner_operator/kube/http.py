"""One place that turns a raw API response into JSON or an ApiException."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

# Every Kubernetes API request's timeout (seconds): a request that hangs must not hold a
# reconcile, a Secret read or a cache write for longer.
REQUEST_TIMEOUT = 10.0
# A list (an informer's first read, or its relist) may carry every object of a kind.
LIST_TIMEOUT = 60.0


async def send(call: Awaitable[Any]) -> dict[str, Any]:
    """Await an API call made with ``_preload_content=False`` and return its JSON body.

    With ``_preload_content=False`` kubernetes_asyncio hands back the raw response whatever
    its status, so an error answer (a quota refusal, a 404) would pass for success and its
    Status object for the created object. Here any status >= 400 raises ApiException, like
    the preloading calls do."""
    resp = await call
    try:
        raw = await resp.read()
        if resp.status >= 400:
            exc = ApiException(status=resp.status, reason=resp.reason)
            exc.body = raw.decode(errors="replace")
            # Retry-After of a 429 (API Priority and Fairness)
            exc.headers = getattr(resp, "headers", None)
            raise exc
        return json.loads(raw) if raw else {}
    finally:
        resp.release()
