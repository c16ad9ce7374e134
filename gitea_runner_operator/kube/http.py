"""One place that turns a raw API response into JSON or an ApiException."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.kube.ratelimit import TokenBucket

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
            raise exc
        return json.loads(raw) if raw else {}
    finally:
        resp.release()


async def write_unless_gone(
    limiter: TokenBucket, namespace: str, request: Callable[[], Awaitable[Any]]
) -> bool:
    """One write of the operator's to an object that may have been deleted meanwhile: under
    the namespace's share of the write limit, then :func:`send`; False when the object was
    gone (404), so a delete, patch or release of something gone is not an error.
    ``request`` makes the call once the limiter lets it go."""
    await limiter.acquire(namespace)
    try:
        await send(request())
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True
