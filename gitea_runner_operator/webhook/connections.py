"""Open connections to the webhook receiver: bounded in number, and each given a deadline to
send a request.

The receiver is reachable from every Pod, tenants' CI jobs included. aiohttp waits for a new
connection's first request without end, and keeps a connection between requests for an hour,
so a client that opens connections and sends nothing (or a few bytes of headers at a time)
holds a socket and a task for each, as many as it likes. Here:

- a connection that has not sent a whole request's headers ``header_deadline`` seconds after
  it opened is closed; between requests, aiohttp's keep-alive timeout (``KEEPALIVE``) does the
  same;
- at most ``cap`` connections are open. One more closes the oldest connection waiting for a
  request (silent, or idle between requests), never one whose request is being handled; only
  when every open connection is handling a request is the new one closed instead.

Gitea sends a request's headers and body as soon as it connects, so its connections are
never the oldest of those waiting: a flood of silent ones, from any number of addresses or
from the one address of a proxy in front of the receiver, closes its own kind.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import web

DEFAULT_CONNECTIONS: Final = 512
DEFAULT_HEADER_DEADLINE: Final = 10.0
# Seconds aiohttp keeps a connection open after a response, waiting for the next request
# (its own default is an hour). Gitea's client opens a new connection when it needs one.
KEEPALIVE: Final = 15.0


class Connections:
    """Attach to an aiohttp ``web.Server`` (:meth:`attach`) and install :meth:`middleware`."""

    def __init__(
        self, cap: int = DEFAULT_CONNECTIONS, header_deadline: float = DEFAULT_HEADER_DEADLINE
    ) -> None:
        self._cap = max(1, cap)
        self._deadline = header_deadline
        # Connections waiting for a request, the longest waiting first, each with the timer
        # of its header deadline (None between requests: aiohttp's keep-alive timer then).
        self._waiting: OrderedDict[Any, asyncio.TimerHandle | None] = OrderedDict()
        self._handling: set[Any] = set()
        self._attached = False  # an app served without attach (tests) is not tracked
        self.closed_waiting = 0  # closed to make room for a new one, for tests and metrics
        self.closed_silent = 0  # closed at their header deadline
        self.refused = 0  # closed at once: every open connection was handling a request

    def __len__(self) -> int:
        return len(self._waiting) + len(self._handling)

    def attach(self, server: web.Server) -> None:
        """Be told of the server's connections as they open and close."""
        made, lost = server.connection_made, server.connection_lost
        self._attached = True

        def connection_made(handler: Any, transport: asyncio.Transport) -> None:
            made(handler, transport)
            self._opened(handler)

        def connection_lost(handler: Any, exc: BaseException | None) -> None:
            self._forget(handler)
            lost(handler, exc)

        setattr(server, "connection_made", connection_made)  # noqa: B010 - an instance's own
        setattr(server, "connection_lost", connection_lost)  # noqa: B010

    @web.middleware
    async def middleware(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        """A request's headers are in: its connection is handling it until the answer."""
        if not self._attached:
            return await handler(request)
        protocol = request.protocol
        self._handle(protocol)
        try:
            return await handler(request)
        finally:
            self._wait(protocol)

    def _opened(self, handler: Any) -> None:
        if len(self) >= self._cap and not self._close_oldest_waiting():
            self.refused += 1
            handler.force_close()
            return
        loop = asyncio.get_running_loop()
        self._waiting[handler] = loop.call_later(self._deadline, self._expire, handler)

    def _close_oldest_waiting(self) -> bool:
        if not self._waiting:
            return False
        oldest, timer = self._waiting.popitem(last=False)
        if timer is not None:
            timer.cancel()
        self.closed_waiting += 1
        oldest.force_close()
        return True

    def _expire(self, handler: Any) -> None:
        if self._waiting.get(handler) is None:
            return  # handling a request, or between requests (aiohttp's keep-alive timer)
        del self._waiting[handler]
        self.closed_silent += 1
        handler.force_close()

    def _handle(self, handler: Any) -> None:
        timer = self._waiting.pop(handler, None)
        if timer is not None:
            timer.cancel()
        self._handling.add(handler)

    def _wait(self, handler: Any) -> None:
        self._handling.discard(handler)
        if handler.transport is not None:  # still open: waits for its next request
            self._waiting[handler] = None

    def _forget(self, handler: Any) -> None:
        timer = self._waiting.pop(handler, None)
        if timer is not None:
            timer.cancel()
        self._handling.discard(handler)
