"""``POST /hooks/gitea``: a Gitea delivery passes four stages, one way, and only ever
*schedules* work:

    guard (guard.py) -> verify (verify.py) -> route (routing.py) -> dispatch (dispatch.py)

The guard keeps a flood cheap before anything is verified (the size, the signature header,
the content type, the address's penalties, the body read within a deadline, a slot, a
delivery seen once); verify finds who signed it and so which groups it may wake; route
reads the verified body and picks the groups it concerns; dispatch wakes them here, paced
(wakes.py), or hands the delivery to the replica that serves them. The receiver reaches the
operator through one port (ports.Operator). What it answers: answers.py.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final

import structlog
from aiohttp import web

from gitea_runner_operator.webhook import signature
from gitea_runner_operator.webhook.answers import (
    BUSY,
    DELIVERY_HEADER,
    DUPLICATE,
    EVENT_HEADER,
    GONE,
    JSON,
    PENALISED,
    SLOW,
    STANDBY,
    TOO_LARGE,
    UNAUTHORIZED,
    UNSUPPORTED,
    Answer,
)
from gitea_runner_operator.webhook.connections import (
    DEFAULT_CONNECTIONS,
    DEFAULT_HEADER_DEADLINE,
    KEEPALIVE,
    Connections,
)
from gitea_runner_operator.webhook.dispatch import Dispatcher
from gitea_runner_operator.webhook.forwarding import FORWARDED_HEADER, Forwarder, from_replica
from gitea_runner_operator.webhook.guard import (
    DEFAULT_READ_DEADLINE,
    DEFAULT_READS_PER_CLIENT,
    DEFAULT_SLOT_WAIT,
    DEFAULT_SLOTS,
    PENALTY_DELAY,
    Deliveries,
    Penalties,
    QuietLog,
    ReadGate,
)
from gitea_runner_operator.webhook.ports import Operator
from gitea_runner_operator.webhook.routing import routed
from gitea_runner_operator.webhook.verify import Verifier
from gitea_runner_operator.webhook.wakes import WAKE_INTERVAL

log = structlog.get_logger(__name__)

PATH: Final = "/hooks/gitea"
DEFAULT_PORT: Final = 8082
DEFAULT_MAX_BODY: Final = 1 << 20  # workflow_job payloads are a few KiB


@dataclass(frozen=True, slots=True)
class Limits:
    """The receiver's bounds (guard.py says why each): ``wake_interval`` paces each group's
    wake-ups (wakes.py), ``penalty_delay`` is how late the 429 of an address with too many
    failed authentications comes."""

    max_body: int = DEFAULT_MAX_BODY
    slots: int = DEFAULT_SLOTS
    slot_wait: float = DEFAULT_SLOT_WAIT
    wake_interval: float = WAKE_INTERVAL
    read_deadline: float = DEFAULT_READ_DEADLINE
    reads_per_client: int = DEFAULT_READS_PER_CLIENT
    connections: int = DEFAULT_CONNECTIONS
    header_deadline: float = DEFAULT_HEADER_DEADLINE
    penalty_delay: float = PENALTY_DELAY


class WebhookServer:
    """An aiohttp server for Gitea's webhooks. ``operator_secret``: the operator-wide secret
    (system hooks), if any; ``forwarder`` (``--sharding``) hands a delivery to the replica
    that serves its groups."""

    def __init__(
        self,
        host: str,
        port: int,
        operator: Operator,
        *,
        operator_secret: bytes | None = None,
        limits: Limits = Limits(),
        forwarder: Forwarder | None = None,
        forward_key: bytes | None = None,
    ) -> None:
        self._host = host
        self._port = port
        self._operator = operator
        self._max_body = limits.max_body
        self.connections = Connections(limits.connections, limits.header_deadline)
        self._read_deadline = limits.read_deadline
        self._reads = ReadGate(limits.reads_per_client)
        self._slots = asyncio.Semaphore(limits.slots)
        self._slot_wait = limits.slot_wait
        self._deliveries = Deliveries()
        # The replicas' shared key: a forward that verifies under it is never penalised.
        self._forward_key = forward_key
        self.penalties = Penalties()
        self._penalty_delay = limits.penalty_delay
        self._quiet = QuietLog(log)
        self.verifier = Verifier(operator, operator_secret, self.penalties, self._quiet)
        self.dispatcher = Dispatcher(operator, forwarder, limits.wake_interval)
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None

    def app(self) -> web.Application:
        app = web.Application(
            client_max_size=self._max_body, middlewares=[self.connections.middleware]
        )
        app.router.add_post(PATH, self._handle)
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None, keepalive_timeout=KEEPALIVE)
        await self._runner.setup()
        assert self._runner.server is not None
        self.connections.attach(self._runner.server)
        self._site = web.TCPSite(self._runner, self._host, self._port)
        await self._site.start()

    @property
    def port(self) -> int:
        """The bound port (useful when started on port 0)."""
        server = self._site._server if self._site is not None else None
        sockets = getattr(server, "sockets", None)
        return int(sockets[0].getsockname()[1]) if sockets else self._port

    async def stop(self) -> None:
        await self.dispatcher.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        answer = await self._deliver(request)
        try:
            self._operator.delivered(answer.outcome)
        except Exception:
            log.exception("webhook outcome callback failed")
        return web.Response(status=answer.status, text=answer.text or None)

    async def _deliver(self, request: web.Request) -> Answer:
        event = request.headers.get(EVENT_HEADER, "")
        guarded = await self._guard(request, event)
        if isinstance(guarded, Answer):
            return guarded
        body, digest = guarded
        # A slot only now that the body is in: what waits for one costs CPU only.
        try:
            async with asyncio.timeout(self._slot_wait):
                await self._slots.acquire()
        except TimeoutError:
            return BUSY
        try:
            # A forward the replicas signed is never charged to the forwarding replica.
            charged = not self._from_replica(request)
            verified = await self.verifier.verify(request, body, digest, event, charged=charged)
        finally:
            self._slots.release()
        if isinstance(verified, Answer):
            if verified is PENALISED:  # late, but holding no slot
                await self.penalties.refuse(request.remote or "", self._penalty_delay)
            return verified
        if not self._deliveries.first_time(request.headers.get(DELIVERY_HEADER)):
            return DUPLICATE  # Gitea's redelivery, or a replay: woken already
        found = routed(event, verified.body, verified.groups)
        if isinstance(found, Answer):
            return found
        return await self.dispatcher.dispatch(request, verified.body, found, verified.groups)

    async def _guard(self, request: web.Request, event: str) -> Answer | tuple[bytes, bytes]:
        """What is refused before anything is verified; else the body and its signature."""
        if not self._operator.active():
            # A standby knows no groups, so every group secret would look wrong: say what is
            # true instead of 401. Polling (on the leader) still finds the job.
            return STANDBY
        if request.content_length is not None and request.content_length > self._max_body:
            self._quiet("webhook delivery too large", remote=request.remote, gitea_event=event)
            return TOO_LARGE
        digest = signature.parse_signature(request.headers.get(signature.SIGNATURE_HEADER))
        if digest is None:
            self._quiet("webhook delivery unsigned", remote=request.remote, gitea_event=event)
            return UNAUTHORIZED
        if request.content_type != JSON:
            # Refused unread: a body Gitea never sends would fail ``parse_body`` anyway.
            self._quiet("webhook delivery not JSON", remote=request.remote, gitea_event=event)
            return UNSUPPORTED
        if (
            self.verifier.hint_only(request)
            and self.penalties.exhausted(request.remote or "")
            and not self._from_replica(request)
        ):
            await self.penalties.refuse(request.remote or "", self._penalty_delay)
            return PENALISED  # unread: only the hint could find its secret
        received = await self._receive(request, event)
        return received if isinstance(received, Answer) else (received, digest)

    def _from_replica(self, request: web.Request) -> bool:
        """A forward another replica tagged with the replicas' key (forwarding.py): Gitea's
        signature is still verified, but a failure is the tenant's, never the forwarder's."""
        if FORWARDED_HEADER not in request.headers:
            return False
        return from_replica(self._forward_key, request.path_qs, request.headers)

    async def _receive(self, request: web.Request, event: str) -> bytes | Answer:
        """The whole body, within the read deadline, unless newer reads need its place. A
        client that goes away is not an error of ours: one quiet line, no traceback."""
        peer = request.remote or ""
        ticket: int | None = None
        try:
            async with asyncio.timeout(self._read_deadline) as deadline:
                # Given up (a 408 now) when newer reads need the place: see ReadGate.
                ticket = self._reads.enter(peer, lambda: deadline.reschedule(-1.0))
                return await request.read()
        except web.HTTPRequestEntityTooLarge:
            self._quiet("webhook delivery too large", remote=peer, gitea_event=event)
            return TOO_LARGE
        except TimeoutError:
            self._quiet("webhook delivery body not received in time", remote=peer)
            return SLOW
        except ConnectionError:
            self._quiet("webhook client went away before its delivery was read", remote=peer)
            return GONE
        finally:
            if ticket is not None:
                self._reads.leave(ticket)
