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

Authenticated by the replicas themselves when they share a key (``--forward-key-file``, a
Secret the chart makes): :data:`FORWARD_AUTH_HEADER` is an HMAC-SHA256, under that key, of
the forwarding replica's name, the path and Gitea's event, delivery id and signature
headers (:func:`forward_tag`). The receiver checks it before reading the body
(:func:`from_replica`) and never charges a forward that verifies to the forwarding
replica's address: a tenant who rotates its hook Secret fails Gitea's signature at the peer
too, and the peer used to penalise the forwarding replica, holding back every tenant's
forwards from it. Gitea's own signature is still verified by the receiver, so the key adds
no power to act, only the right not to be penalised for another's failures.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
from collections.abc import Callable, Mapping
from typing import Final, Literal

import aiohttp
import structlog

from gitea_runner_operator.kit.lograte import LogRate
from gitea_runner_operator.webhook.guard import DEFAULT_READS_PER_CLIENT

log = structlog.get_logger(__name__)

FORWARDED_HEADER: Final = "X-Gitea-Runners-Forwarded"  # value: the forwarding replica's name
FORWARD_AUTH_HEADER: Final = "X-Gitea-Runners-Forward-Auth"  # forward_tag, hex
# Gitea's headers a forward carries, and the tag covers.
_SIGNED_HEADERS: Final = ("X-Gitea-Event", "X-Gitea-Delivery", "X-Gitea-Signature")
FORWARD_TIMEOUT: Final = 2.0
MAX_IN_FLIGHT: Final = 64
LOG_EVERY: Final = 60.0

ForwardOutcome = Literal["sent", "failed", "dropped"]


def forward_tag(key: bytes, identity: str, path: str, headers: Mapping[str, str]) -> str:
    """The replicas' HMAC over what identifies a forward: who forwards, where, and Gitea's
    event, delivery id and signature (which binds the body under the tenant's secret)."""
    fields = [identity, path, *(headers.get(name, "") for name in _SIGNED_HEADERS)]
    message = "\n".join(f.replace("\n", " ") for f in fields).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def from_replica(key: bytes | None, path: str, headers: Mapping[str, str]) -> bool:
    """Whether a request is a forward of a replica that holds ``key`` (False without one)."""
    identity, tag = headers.get(FORWARDED_HEADER), headers.get(FORWARD_AUTH_HEADER)
    if key is None or not identity or not tag or len(tag) != 64:
        return False
    return hmac.compare_digest(forward_tag(key, identity, path, headers), tag)


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
        key: bytes | None = None,
    ) -> None:
        self._identity = identity
        self._key = key  # the replicas' shared key (forward_tag); None: forwards untagged
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
        if self._key is not None:
            sent[FORWARD_AUTH_HEADER] = forward_tag(self._key, self._identity, path, sent)
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
