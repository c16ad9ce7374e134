"""``--sharding``: hand a verified delivery to the replica that serves its groups
(sharding/forwards.py decides which; this is the HTTP).

The peer gets the delivery as Gitea sent it (the original body, event, delivery id and
signature) and verifies it itself, so forwarding adds no trust: a replica cannot make a peer
act on anything Gitea did not sign. :data:`FORWARDED_HEADER` marks a forwarded delivery, which
is never forwarded again; a sender who spoofs the header only stops a forward, which the next
poll makes up for.

Bounded, because a delivery is a trigger and must never cost the receiver more than its
answer: one forward per peer per delivery, sent after Gitea's answer is on its way (never
awaited by it), within ``timeout`` seconds in all; at most ``in_flight`` forwards at once (one
more is dropped and counted), and at most ``per_peer`` connections to one peer, the number of
bodies a receiver reads from one address at once (guard.ReadGate). A peer's answer is judged
by its status line alone: its body is never read. Failures are one log line per peer per
``LOG_EVERY`` seconds, with the number held back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Final, Literal

import aiohttp
import structlog

from gitea_runner_operator.kit.lograte import LogRate
from gitea_runner_operator.webhook.guard import DEFAULT_READS_PER_CLIENT

log = structlog.get_logger(__name__)

FORWARDED_HEADER: Final = "X-Gitea-Runners-Forwarded"  # value: the forwarding replica's name
FORWARD_TIMEOUT: Final = 2.0
MAX_IN_FLIGHT: Final = 64
LOG_EVERY: Final = 60.0

ForwardOutcome = Literal["sent", "failed", "dropped"]


class Forwarder:
    """Sends forwards off the caller's path; :meth:`close` cancels those still under way."""

    def __init__(
        self,
        identity: str,
        *,
        timeout: float = FORWARD_TIMEOUT,
        in_flight: int = MAX_IN_FLIGHT,
        per_peer: int = DEFAULT_READS_PER_CLIENT,
        on_outcome: Callable[[ForwardOutcome], None] | None = None,
    ) -> None:
        self._identity = identity
        self._timeout = timeout
        self._cap = in_flight
        self._per_peer = per_peer
        self._on_outcome = on_outcome
        self._tasks: set[asyncio.Task[None]] = set()
        self._session: aiohttp.ClientSession | None = None
        self._logs = LogRate(LOG_EVERY)

    def __len__(self) -> int:
        """Forwards under way."""
        return len(self._tasks)

    def send(self, address: str, path: str, body: bytes, headers: Mapping[str, str]) -> bool:
        """Start forwarding ``body`` with ``headers`` to ``http://<address><path>``; False
        when it was dropped (too many under way)."""
        if len(self._tasks) >= self._cap:
            self._count("dropped")
            self._log("webhook forwards dropped: too many under way", "dropped", cap=self._cap)
            return False
        sent = {**headers, FORWARDED_HEADER: self._identity}
        task = asyncio.create_task(self._send(address, path, body, sent), name="webhook-forward")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()  # their done callbacks may not have run yet
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _send(self, address: str, path: str, body: bytes, headers: Mapping[str, str]) -> None:
        try:
            async with asyncio.timeout(self._timeout):  # connecting and waiting for a slot too
                session = self._open()
                async with session.post(
                    f"http://{address}{path}", data=body, headers=headers, allow_redirects=False
                ) as answer:
                    status = answer.status  # leaving unread closes the connection: no body read
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            self._count("failed")
            self._log("webhook forward failed", address, peer=address, error=type(exc).__name__)
            return
        if 200 <= status < 300:
            self._count("sent")
            return
        self._count("failed")
        self._log("webhook forward refused", address, peer=address, status=status)

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._cap, limit_per_host=self._per_peer)
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        return self._session

    def _count(self, outcome: ForwardOutcome) -> None:
        if self._on_outcome is not None:
            try:
                self._on_outcome(outcome)
            except Exception:
                log.exception("webhook forward outcome callback failed")

    def _log(self, event: str, cause: str, **fields: object) -> None:
        held = self._logs.admit(cause)
        if held is not None:
            log.warning(event, held_back=held, **fields)
