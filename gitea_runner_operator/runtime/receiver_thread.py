"""The webhook receiver on a thread and event loop of its own.

A delivery is read, verified and routed in a few turns of an event loop (its connection, its
request, its handler). On the controller's loop each of those turns also ran whatever else
was ready: under issue 45's attacks, other tenants' Gitea answers, their parses and their
screening. A genuine delivery was accepted 12 ms after Gitea queued its job at p90 and 25 ms
at p99, against 6 and 8 ms without the attacks (the hostile benchmark without the webhook
attacks, so the receiver's own load was not the cause), and a pickup waits for that before
anything else. On a loop of its own the receiver's turns wait for no one else's callbacks,
only for the interpreter, which a busy thread hands over within the switch interval
(runtime/gil.py: 1 ms). A flood of forged deliveries also stays on the receiver's loop: it
costs the controller's loop its share of the interpreter, no longer a place in each of its
turns.

The receiver reaches the controller only through its one port (runtime/webhook_port.py,
with the controller's loop as ``main``): what it tells is handed to that loop, what it asks
is read safely from this thread. Its own state (penalties, wake pacing, the hook secrets'
cache, the peers' connections) is touched by this thread alone.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import structlog

from gitea_runner_operator.kit.thread_names import name_this_thread
from gitea_runner_operator.webhook.server import WebhookServer

log = structlog.get_logger(__name__)

T = TypeVar("T")
A = TypeVar("A")

# How long stopping waits for the receiver's thread to end once its server stopped.
JOIN_WAIT: Final = 10.0


def on_loop(
    loop: asyncio.AbstractEventLoop, call: Callable[[A], Awaitable[T]]
) -> Callable[[A], Awaitable[T]]:
    """``call``, made on ``loop`` (the controller's, whose API client it uses) and awaited
    from whichever loop asks: the receiver's secret reads. Cancelled there, cancelled here."""

    async def made_there(arg: A) -> T:
        async def run() -> T:
            return await call(arg)

        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(run(), loop))

    return made_there


class ReceiverThread:
    """Runs ``server`` on a thread of its own from :meth:`start` to :meth:`stop`."""

    def __init__(self, server: WebhookServer) -> None:
        self.server = server
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.server.port

    def problem(self) -> str | None:
        """Why the receiver no longer serves though it was not stopped (None: it serves, or
        was stopped): /healthz fails then, and the kubelet restarts the operator, instead
        of every delivery going unanswered while the controller polls on."""
        thread = self._thread
        if thread is None or self._loop is None or thread.is_alive():
            return None
        return "the webhook receiver's thread ended"

    async def start(self) -> None:
        """Bind and serve; raises here what binding raised there (a port in use: OSError)."""
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._run, args=(started,), name="webhook-receiver", daemon=True
        )
        self._thread.start()
        await asyncio.wrap_future(started)

    def _run(self, started: concurrent.futures.Future[None]) -> None:
        name_this_thread()
        # The runner's close cancels whatever tasks the server left (a forward under way, a
        # handler), shuts the loop's generators and executor down and closes it.
        with asyncio.Runner() as runner:
            try:
                runner.run(self.server.start())
            except BaseException as exc:
                started.set_exception(exc)
                return
            # A local: stop() may clear self._loop the moment start() returns, before this
            # thread gets here (seen under load as run_forever on None).
            loop = self._loop = runner.get_loop()
            started.set_result(None)
            loop.run_forever()

    async def stop(self) -> None:
        """Stop the server on its loop, then the loop and the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._loop = None
        if not thread.is_alive():  # it ended on its own (problem()): its loop is closed
            return
        try:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self.server.stop(), loop))
        except Exception:
            log.exception("stopping the webhook receiver failed")
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, JOIN_WAIT)
        if thread.is_alive():
            log.warning("the webhook receiver's thread did not end", waited=JOIN_WAIT)
