"""One aiohttp session per Gitea base URL and trust: the connections groups share."""

from __future__ import annotations

import asyncio
import ssl as ssl_module
import time
from collections.abc import Callable

import aiohttp

from gitea_runner_operator.forge.http import DEFAULT_TIMEOUT
from gitea_runner_operator.kit.proxies import proxied


class SessionPool:
    """One aiohttp session per Gitea base URL (and trust settings), so groups on the same
    instance share connections.

    Sessions keep no cookies: a cookie that Gitea set for one tenant's token must never ride
    along on another tenant's request. They honour ``HTTPS_PROXY``/``NO_PROXY`` from the
    environment, as other cluster tools do (asked once per session: kit/proxies.py).
    Sessions no group uses any more are closed by :meth:`retain`.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._sessions: dict[tuple[str, str], aiohttp.ClientSession] = {}
        self._used: dict[tuple[str, str], float] = {}
        self._clock = clock

    def session_for(
        self, base_url: str, ssl: ssl_module.SSLContext | None = None, trust_id: str = ""
    ) -> aiohttp.ClientSession:
        key = (base_url.rstrip("/"), trust_id)
        self._used[key] = self._clock()
        session = self._sessions.get(key)
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(ssl=ssl if ssl is not None else True, limit=50)
            session = aiohttp.ClientSession(
                timeout=DEFAULT_TIMEOUT,
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=proxied(base_url),
            )
            self._sessions[key] = session
        return session

    async def retain(self, base_urls: set[str]) -> None:
        """Close the sessions of base URLs that no group uses any more."""
        gone = [k for k in self._sessions if k[0] not in base_urls]
        await self._close(gone)

    async def expire(self, idle: float) -> None:
        """Close the sessions nobody asked for in ``idle`` seconds: those of a CA bundle's
        old contents, or of a token's old trust, would otherwise stay open for good. Longer
        than any request's deadline, so no fetch is still using one."""
        cutoff = self._clock() - idle
        await self._close([k for k in self._sessions if self._used.get(k, cutoff) <= cutoff])

    async def _close(self, keys: list[tuple[str, str]]) -> None:
        sessions = [self._sessions.pop(k) for k in keys]
        for k in keys:
            self._used.pop(k, None)
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)

    def __len__(self) -> int:
        return len(self._sessions)

    async def close(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
