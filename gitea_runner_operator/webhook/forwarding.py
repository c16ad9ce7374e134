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
more is dropped and counted), shared by namespace: a namespace may hold at most
``in_flight / (namespaces with forwards under way + 1)`` of them, so one tenant's signed
deliveries cannot take the slots of every other (3,200 of a victim's forwards were dropped
so); and at most ``per_peer`` connections to one peer, the number of bodies a receiver reads
from one address at once (guard.ReadGate). A forward that fails calls its ``on_failed``
(the dispatcher wakes the groups here: queued, they are polled at once should this replica
take them over from a peer that is gone). A peer's answer is judged
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

ForwardOutcome = Literal["sent", "failed", "dropped", "paced"]


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
        self._by_namespace: dict[str, int] = {}  # forwards under way, by namespace
        self._session: aiohttp.ClientSession | None = None
        self._logs = LogRate(LOG_EVERY)

    def __len__(self) -> int:
        """Forwards under way."""
        return len(self._tasks)

    def send(
        self,
        address: str,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        namespaces: frozenset[str] = frozenset(),
        on_failed: Callable[[], None] | None = None,
    ) -> bool:
        """Start forwarding ``body`` with ``headers`` to ``http://<address><path>``, for the
        groups of ``namespaces``; False when it was dropped (too many under way, in all or
        for one of those namespaces)."""
        if not self._admits(namespaces):
            self._count("dropped")
            self._log("webhook forwards dropped: too many under way", "dropped", cap=self._cap)
            return False
        sent = {**headers, FORWARDED_HEADER: self._identity}
        if self._key is not None:
            sent[FORWARD_AUTH_HEADER] = forward_tag(self._key, self._identity, path, sent)
        for ns in namespaces:
            self._by_namespace[ns] = self._by_namespace.get(ns, 0) + 1
        task = asyncio.create_task(
            self._send(address, path, body, sent, on_failed), name="webhook-forward"
        )
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._done(t, namespaces))
        return True

    def paced(self) -> None:
        """A forward not sent: none of its groups had a wake-up token left (dispatch.py)."""
        self._count("paced")

    def _admits(self, namespaces: frozenset[str]) -> bool:
        if len(self._tasks) >= self._cap:
            return False
        active = set(self._by_namespace) | namespaces
        share = max(1, self._cap // (len(active) + 1))
        return all(self._by_namespace.get(ns, 0) < share for ns in namespaces)

    def _done(self, task: asyncio.Task[None], namespaces: frozenset[str]) -> None:
        self._tasks.discard(task)
        for ns in namespaces:
            left = self._by_namespace.pop(ns, 0) - 1
            if left > 0:
                self._by_namespace[ns] = left

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()  # their done callbacks may not have run yet
        self._by_namespace.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _send(
        self,
        address: str,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        on_failed: Callable[[], None] | None = None,
    ) -> None:
        if not await self._post(address, path, body, headers) and on_failed is not None:
            try:
                on_failed()
            except Exception:
                log.exception("webhook forward failure callback failed")

    async def _post(self, address: str, path: str, body: bytes, headers: Mapping[str, str]) -> bool:
        """One forward; True when the peer took it."""
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
            return False
        if 200 <= status < 300:
            self._count("sent")
            return True
        self._count("failed")
        self._log("webhook forward refused", address, peer=address, status=status)
        return False

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
