"""One place that turns a raw API response into JSON or an ApiException, and one place that
writes under the write limit.

API Priority and Fairness: an API server that is short of seats answers ``429 Too Many
Requests`` with a ``Retry-After``. Every write (:func:`write`) then pauses the operator's
whole write budget for that long (``TokenBucket.pause``: the server is telling all of us,
not one call) and is tried again, up to ``THROTTLE_ATTEMPTS`` times; after that it raises
:class:`Throttled`, a definite no (the write did not happen), so callers can undo what
they expected and retry the decision later. A 429 slows the operator down; it never turns
into a decision lost."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.kit import fence
from gitea_runner_operator.kube.ratelimit import NoWriteToken, TokenBucket

log = structlog.get_logger(__name__)

# Every Kubernetes API request's timeout (seconds): a request that hangs must not hold a
# reconcile, a Secret read or a cache write for longer.
REQUEST_TIMEOUT = 10.0
# The patch body every partial write of the operator sends (JSON merge patch, RFC 7386).
MERGE_PATCH = "application/merge-patch+json"
# A list (an informer's first read, or its relist) may carry every object of a kind.
LIST_TIMEOUT = 60.0
# A Lease call (leader election, sharding's membership): shorter than REQUEST_TIMEOUT, so that
# a hung call leaves room for another try within the renew deadline (10 s by default).
LEASE_TIMEOUT = 5.0
# A scrape waits for its TokenReview and SubjectAccessReview: a slow API server answers the
# scraper 503 after this long rather than holding its connection.
REVIEW_TIMEOUT = 5.0
# A watch asks the server to end it after a random timeout in this range (seconds, as
# client-go's reflector), so the watches of many informers do not all end at once; the client
# gives up WATCH_GRACE later, so only a connection that went silent is cut by the client.
WATCH_TIMEOUT_MIN = 300
WATCH_TIMEOUT_MAX = 600
WATCH_GRACE = 30
# A 429 is tried again this many times in all, each after the server's Retry-After (or
# THROTTLE_DEFAULT when it gave none), capped at THROTTLE_MAX.
THROTTLE_ATTEMPTS = 4
THROTTLE_DEFAULT = 1.0
THROTTLE_MAX = 10.0


class Throttled(Exception):
    """The write did not happen: the API server answered 429 to every attempt, or no write
    token came within the write limit's deadline (ratelimit.NoWriteToken)."""


def retry_after(exc: ApiException) -> float:
    """The server's Retry-After in seconds (bounded), or THROTTLE_DEFAULT."""
    headers = getattr(exc, "headers", None) or {}
    try:
        value = float(headers.get("Retry-After", THROTTLE_DEFAULT))
    except (TypeError, ValueError):
        value = THROTTLE_DEFAULT
    return min(max(value, 0.0), THROTTLE_MAX)


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


async def write_unless_gone(
    limiter: TokenBucket, namespace: str, request: Callable[[], Awaitable[Any]]
) -> bool:
    """One write of the operator's to an object that may have been deleted meanwhile: under
    the namespace's share of the write limit, then :func:`send`; False when the object was
    gone (404), so a delete, patch or release of something gone is not an error.
    ``request`` makes the call once the limiter lets it go."""
    try:
        await write(limiter, namespace, request)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


async def create(
    limiter: TokenBucket,
    namespace: str,
    create_namespaced: Callable[..., Awaitable[Any]],
    manifest: dict[str, Any],
    *,
    urgent: bool = False,
) -> dict[str, Any]:
    """Create one object in ``namespace`` with ``create_namespaced`` of the generated client,
    through :func:`write`, raw and within :data:`REQUEST_TIMEOUT`; the created object."""
    return await write(
        limiter,
        namespace,
        lambda: create_namespaced(
            namespace, manifest, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
        ),
        urgent=urgent,
    )


async def merge_patch_unless_gone(
    limiter: TokenBucket, namespace: str, patch: Callable[..., Awaitable[Any]], *args: Any
) -> bool:
    """Merge-patch one object, ``patch(*args)`` of the generated client, through
    :func:`write_unless_gone`: every partial write of the operator goes as a JSON merge patch,
    raw and within :data:`REQUEST_TIMEOUT`. False when the object was gone."""
    return await write_unless_gone(
        limiter,
        namespace,
        lambda: patch(
            *args,
            _content_type=MERGE_PATCH,
            _preload_content=False,
            _request_timeout=REQUEST_TIMEOUT,
        ),
    )


async def write(
    limiter: TokenBucket,
    namespace: str,
    request: Callable[[], Awaitable[Any]],
    *,
    urgent: bool = False,
) -> dict[str, Any]:
    """One write under the write limit (``urgent``: a runner create, served before the
    writes that only report) and among its namespace's few in flight; a 429 pauses the
    whole limit and tries again."""
    asked = time.monotonic()
    async with limiter.in_flight.turn(namespace):
        return await _write(limiter, namespace, request, urgent, asked)


async def _write(
    limiter: TokenBucket,
    namespace: str,
    request: Callable[[], Awaitable[Any]],
    urgent: bool,
    asked: float,
) -> dict[str, Any]:
    for _ in range(THROTTLE_ATTEMPTS):
        placed = time.monotonic()
        try:
            await limiter.acquire(namespace, urgent=urgent)
        except NoWriteToken as exc:
            raise Throttled(str(exc)) from None
        if urgent:  # a runner create: how long it waited before it left (the pickup's spans)
            now = time.monotonic()
            log.debug(
                "urgent write sent",
                namespace=namespace,
                place_waited=round(placed - asked, 4),
                token_waited=round(now - placed, 4),
                in_flight=limiter.in_flight.in_use,
            )
        # After the token's wait, just before the request leaves, and bounded by what the
        # right has left: it may lapse there, or while the request waits for a connection.
        try:
            async with fence.bounded(f"write in {namespace}"):
                return await send(request())
        except ApiException as exc:
            if exc.status != 429:
                raise
            limiter.pause(retry_after(exc))
    raise Throttled(f"the API server answered 429 to {THROTTLE_ATTEMPTS} attempts")
