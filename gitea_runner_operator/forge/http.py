"""The transport to one Gitea (or Forgejo) instance: every request the forge package makes
goes through :meth:`GiteaTransport.call`, so each rule below is written once.

Why each rule is here:
- retries with exponential backoff (kit/backoff) and jitter on connection errors and 5xx,
  because Gitea restarts and proxies hiccup, and a poll that fails once should not flip a
  group to not-Ready; but only of idempotent requests (:data:`IDEMPOTENT`): a POST or PATCH
  whose answer was lost may have been done, and sending it again re-runs a job twice (the
  second is refused) or makes a second registration or hook that leaks. Its error goes to the
  caller, whose next pass reads what is there before acting again;
- ``Retry-After`` on 429/503 is obeyed up to a cap; past the cap we give up and tell the poll
  loop how long to stay away instead of blocking the call;
- 401/403/404 are never retried: they do not heal by themselves and become a condition;
- the token only ever travels in the ``Authorization`` header; nothing here logs it;
- every body is bounded in bytes (read in chunks and never past the cap), in the JSON values
  it parses into, and in depth (``forge/limits.py`` has every bound and why); and a status
  that is not Gitea's API answer shows in status as a fixed phrase (never a header or body):
  a tenant chooses the URL, so what comes back is untrusted input that must cost neither
  memory nor an internal service's secrets.
"""

from __future__ import annotations

import asyncio
import copy
import email.utils
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Self, TypeVar, cast

import aiohttp
from pydantic import BaseModel
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
)

from gitea_runner_operator.api.gitea import within_caps
from gitea_runner_operator.forge.errors import (
    GiteaAnswerTooLarge,
    GiteaError,
    GiteaForbidden,
    GiteaNotFound,
    GiteaRateLimited,
    GiteaRedirected,
    GiteaServerError,
    GiteaUnauthorized,
    GiteaUnreachable,
)
from gitea_runner_operator.forge.limits import ANSWER_MAX_BYTES, AnswerBudget, decode
from gitea_runner_operator.forge.refusals import REFUSALS
from gitea_runner_operator.kit import fence
from gitea_runner_operator.kit.backoff import doubling, jittered
from gitea_runner_operator.kit.priority import PICKUPS

# Optional observers (metrics): (method, path, HTTP status or None, seconds) per request, and
# the seconds of each wait that Gitea asked for with Retry-After.
P = TypeVar("P", bound=BaseModel)
RequestHook = Callable[[str, str, int | None, float], None]
WaitHook = Callable[[float], None]
# A place among the requests of one tenant (kit/fair_gate.py), held for one request.
Turns = Callable[[], AbstractAsyncContextManager[None]]

# Per request. An observation as a whole has its own deadline on top (see poll/observer).
DEFAULT_TIMEOUT = aiohttp.ClientTimeout(total=20, connect=5, sock_read=15)
# Retry-After values are capped: a server (or a tenant's fake one) must not park a group
# for hours; recovery after an outage stays bounded by the poll loop's backoff cap.
MAX_RETRY_AFTER = 300.0
# Far beyond any real queue, but a bound: 200 pages of 50.
DEFAULT_MAX_PAGES = 200
_CHUNK = 64 * 1024
# Methods that mean the same when sent twice (RFC 9110, 9.2.2): the only ones retried.
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
# Methods that change nothing: the only ones sent without the right to write (kit/fence.py).
_READS = frozenset({"GET", "HEAD", "OPTIONS"})
# Statuses named in conditions as they are; any other is "an unexpected status", so a
# condition cannot be used to read an internal service's answers code by code.
_KNOWN_STATUSES = frozenset(
    {300, 301, 302, 303, 304, 307, 308, 400, 405, 406, 409, 410, 413, 415, 422}
    | {500, 501, 502, 503, 504}
)


class _Transient(Exception):
    """A failure worth another attempt; never escapes this module. ``final`` is the error
    to raise if no attempt is left."""

    def __init__(self, final: GiteaError, retry_after: float | None = None) -> None:
        super().__init__(str(final))
        self.final = final
        self.retry_after = retry_after


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP-date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


class GiteaTransport:
    """Requests to one Gitea instance with one token, by the rules above. Cheap: share the
    aiohttp session per URL (:mod:`.sessions`)."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        token: str,
        *,
        page_size: int = 50,
        max_pages: int = DEFAULT_MAX_PAGES,
        attempts: int = 4,
        backoff_initial: float = 0.5,
        backoff_max: float = 8.0,
        max_inline_wait: float = 5.0,
        timeout: aiohttp.ClientTimeout = DEFAULT_TIMEOUT,
        max_body: int = ANSWER_MAX_BYTES,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_request: RequestHook | None = None,
        on_rate_limit_wait: WaitHook | None = None,
    ) -> None:
        self._on_request = on_request
        self._on_rate_limit_wait = on_rate_limit_wait
        self._session = session
        self._base = base_url.rstrip("/")
        self._headers = {"Authorization": f"token {token}", "Accept": "application/json"}
        self.page_size = page_size
        self.max_pages = max_pages
        self._attempts = attempts
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._max_inline_wait = max_inline_wait
        self._timeout = timeout
        self._max_body = max_body
        self._sleep = sleep
        self._budget: AnswerBudget | None = None
        self._turns: Turns | None = None
        self._tenant = ""  # whose observation (the namespace), when metered
        # Listed items refused past a per-item cap (api/caps.py) by this client.
        self.refused = 0

    def metered(self, budget: AnswerBudget, turns: Turns | None = None, tenant: str = "") -> Self:
        """This client, for one observation: every answer it reads and every item it lists
        is charged to ``budget`` (the original stays unmetered, for reaping and the like);
        with ``turns``, each request holds one of its tenant's places (kit/fair_gate.py)
        from its sending until its answer is parsed."""
        twin = copy.copy(self)
        twin._budget = budget
        twin._turns = turns
        twin._tenant = tenant
        return twin

    def _spend_items(self, count: int, where: str) -> None:
        if self._budget is not None:
            self._budget.spend_items(count, where)

    def _within_caps(self, model: type[P], entries: list[Any], where: str) -> list[P]:
        """The listed items that fit their caps; each refused one is counted and logged by
        :mod:`.refusals`. ValidationError for an item of the wrong shape."""
        kept, refused = within_caps(model, entries)
        for cause in refused:
            self.refused += 1
            REFUSALS.refuse(self._base, cause, where)
        return kept

    @property
    def base_url(self) -> str:
        return self._base

    def __repr__(self) -> str:  # never show the token
        return f"GiteaClient({self._base!r})"

    async def call(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None = None,
        json_body: Any = None,
    ) -> Any:
        """One Gitea API call with this client's token and rules (never a redirect, retries of
        what is transient when the method is idempotent, statuses mapped to
        :class:`GiteaError` subclasses); public for the APIs that have no method here
        (hooks)."""
        attempts = self._attempts if method.upper() in IDEMPOTENT else 1
        retrying = AsyncRetrying(
            stop=stop_after_attempt(attempts),
            wait=self._wait,
            retry=retry_if_exception_type(_Transient),
            reraise=True,
            sleep=self._sleep,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._once(method, path, params, json_body)
        except _Transient as exc:
            raise exc.final from None
        raise AssertionError("unreachable: tenacity either returns or raises")  # pragma: no cover

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, _Transient) and exc.retry_after is not None:
            if self._on_rate_limit_wait is not None:
                self._on_rate_limit_wait(exc.retry_after)
            return exc.retry_after
        # Exponential, jittered between half and all of it: spreads the retries of many
        # groups hitting one Gitea.
        ceiling = doubling(self._backoff_initial, self._backoff_max, state.attempt_number)
        return jittered(ceiling, 0.5, 1.0)

    async def _once(
        self, method: str, path: str, params: Mapping[str, str] | None, json_body: Any
    ) -> Any:
        if method.upper() in _READS:
            return await self._attempt(method, path, params, json_body)
        # Each attempt: the right may lapse between two, or while this one waits for a
        # connection (kit/fence.bounded).
        async with fence.bounded(f"{method} {path}"):
            return await self._attempt(method, path, params, json_body)

    async def _attempt(
        self, method: str, path: str, params: Mapping[str, str] | None, json_body: Any
    ) -> Any:
        if self._turns is None:
            return await self._exchange(method, path, params, json_body)
        await PICKUPS.make_way(self._tenant)  # a poll's request, unless a wake asked for it
        async with self._turns():
            return await self._exchange(method, path, params, json_body)

    async def _exchange(
        self, method: str, path: str, params: Mapping[str, str] | None, json_body: Any
    ) -> Any:
        url = self._base + path
        started, status = time.monotonic(), cast(int | None, None)
        try:
            async with self._session.request(
                method,
                url,
                params=params,
                json=json_body,
                headers=self._headers,
                timeout=self._timeout,
                # Never follow a redirect: the Authorization header would go along to
                # wherever the Location points.
                allow_redirects=False,
            ) as resp:
                status = resp.status
                # Only an API answer's body is ever read, and only up to the cap.
                body = await self._read(method, path, resp) if 200 <= status < 300 else b""
                headers = resp.headers
            # Parsed after the connection is back in the pool, and never by a retry.
            where = f"{method} {path}"
            if body and status != 204 and self._budget is not None:
                self._budget.parsing(len(body), where)  # the tenant's share
            value = await decode(body, where, self._tenant) if body and status != 204 else None
            return self._interpret(method, path, status, headers, value)
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            raise _Transient(self._unreachable(exc)) from None
        except TimeoutError as exc:
            raise _Transient(self._unreachable(exc)) from None
        finally:
            if self._on_request is not None:
                self._on_request(method, path, status, time.monotonic() - started)

    async def _read(self, method: str, path: str, resp: aiohttp.ClientResponse) -> bytes:
        too_large = GiteaAnswerTooLarge(
            f"{method} {path}: the answer is larger than {self._max_body // (1024 * 1024)} MiB; "
            "not read (this is not a Gitea API answer)"
        )
        if resp.content_length is not None and resp.content_length > self._max_body:
            raise too_large
        body = bytearray()
        async for chunk in resp.content.iter_chunked(_CHUNK):
            body += chunk
            if len(body) > self._max_body:
                raise too_large
            if self._budget is not None:  # charged as it arrives: the peak is what counts
                self._budget.reading(len(chunk), f"{method} {path}")
        if self._budget is not None:
            self._budget.spend_bytes(len(body), f"{method} {path}")
        return bytes(body)

    def _unreachable(self, exc: BaseException) -> GiteaUnreachable:
        error = GiteaUnreachable(f"{self._base}: no answer (connection failed or timed out)")
        error.detail = f"{type(exc).__name__}: {exc}"  # for the operator's own log only
        return error

    def _interpret(
        self, method: str, path: str, status: int, headers: Mapping[str, str], value: Any
    ) -> Any:
        """A 2xx answer's parsed ``value`` (None when it had no body), or the error its
        status means."""
        where = f"{method} {path}"
        if 200 <= status < 300:
            return value
        shown = f"HTTP {status}" if status in _KNOWN_STATUSES else "an unexpected status"
        if 300 <= status < 400:
            # Never the Location: it would tell a tenant what an internal service answers.
            raise GiteaRedirected(
                f"{where}: Gitea answered a redirect ({shown}); redirects are not followed: "
                "set spec.gitea.url to the address Gitea really serves"
            )
        if status == 401:
            raise GiteaUnauthorized(f"{where}: 401 Unauthorized: the auth token was rejected")
        if status == 403:
            raise GiteaForbidden(f"{where}: 403 Forbidden: the auth token may not use this scope")
        if status == 404:
            raise GiteaNotFound(f"{where}: 404 Not Found")
        retry_after = parse_retry_after(headers.get("Retry-After"))
        if retry_after is not None:
            retry_after = min(retry_after, MAX_RETRY_AFTER)
        if status == 429 or (status == 503 and retry_after is not None):
            wait = retry_after if retry_after is not None else 10.0
            limited = GiteaRateLimited(
                f"{where}: HTTP {status}, Gitea asks to retry after {wait:.0f}s", wait
            )
            if wait > self._max_inline_wait:
                raise limited  # the poll loop waits, not this call
            raise _Transient(limited, retry_after)
        if status >= 500:
            raise _Transient(GiteaServerError(f"{where}: {shown} from Gitea"))
        raise GiteaError(f"{where}: Gitea answered {shown}")
