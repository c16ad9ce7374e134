"""``POST /hooks/gitea``: verify a Gitea delivery, then only *schedule* work (``wake``).

Who may wake whom (think of a hostile tenant who knows its own hook secret and can forge any
payload with it):

- A delivery signed with the **operator-wide** secret (a system hook, set up by the Gitea and
  cluster admins) may wake every group that routing picks.
- A delivery signed with a **group's** secret (``spec.webhook.secretRef``) may wake only the
  groups that hold that same secret, and that secret is tried only for groups whose scope covers
  the repository the payload names. So team A's secret never verifies a payload about a
  repository outside A's scope, and never wakes team B's groups, whatever the payload says.
- Anything else (no signature, a malformed one, one no candidate secret produced) is 401 and
  changes nothing. The body is never logged.

The answer tells a verified sender (Gitea's "Recent deliveries") what happened; an unverified
one learns only "401". What keeps a flood of forged deliveries cheap (verification before
parsing, bounded concurrent work, de-duplication, rate-limited wake-ups): ``guard.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import structlog
from aiohttp import web

from gitea_runner_operator.sharding.forwards import Split
from gitea_runner_operator.webhook import signature
from gitea_runner_operator.webhook.connections import (
    DEFAULT_CONNECTIONS,
    DEFAULT_HEADER_DEADLINE,
    KEEPALIVE,
    Connections,
)
from gitea_runner_operator.webhook.forwarding import FORWARDED_HEADER, Forwarder
from gitea_runner_operator.webhook.guard import (
    DEFAULT_READ_DEADLINE,
    DEFAULT_READS_PER_CLIENT,
    DEFAULT_SLOT_WAIT,
    DEFAULT_SLOTS,
    MAX_CANDIDATE_SECRETS,
    PENALTY_DELAY,
    Deliveries,
    Malformed,
    Penalties,
    QuietLog,
    ReadGate,
    WakeLimiter,
    parse_body,
    repository_hint,
    signers,
)
from gitea_runner_operator.webhook.routing import (
    WAKE_ACTIONS,
    BadDelivery,
    GroupDescriptor,
    Repository,
    SecretLocation,
    parse_job_delivery,
    route,
    same_instance,
    scope_covers,
)
from gitea_runner_operator.webhook.secrets import SecretProvider

log = structlog.get_logger(__name__)

PATH: Final = "/hooks/gitea"
EVENT_HEADER: Final = "X-Gitea-Event"
DELIVERY_HEADER: Final = "X-Gitea-Delivery"
DEFAULT_PORT: Final = 8082
DEFAULT_MAX_BODY: Final = 1 << 20  # workflow_job payloads are a few KiB

Outcome = Literal[
    "accepted",
    "ignored",
    "unauthorized",
    "too_large",
    "bad_request",
    "standby",
    "busy",
    "duplicate",
    "slow",
    "gone",
    "penalised",
    "unsupported",
]


@dataclass(frozen=True, slots=True)
class _Answer:
    outcome: Outcome
    status: int
    text: str = ""


_UNAUTHORIZED: Final = _Answer("unauthorized", 401, "signature missing or not valid\n")
_TOO_LARGE: Final = _Answer("too_large", 413, "body too large\n")
_STANDBY: Final = _Answer("standby", 503, "a standby replica: the leader acts on deliveries\n")
_BUSY: Final = _Answer("busy", 429, "too many deliveries at once; retry later\n")
_DUPLICATE: Final = _Answer("duplicate", 202, "delivery already seen\n")
_SLOW: Final = _Answer("slow", 408, "the body did not arrive in time\n")
# Nobody reads this answer: the client is gone. The outcome still counts it.
_GONE: Final = _Answer("gone", 400, "")
_PENALISED: Final = _Answer(
    "penalised", 429, "too many deliveries from this address failed authentication; retry later\n"
)
_UNSUPPORTED: Final = _Answer("unsupported", 415, "Content-Type must be application/json\n")
_NOT_A_REPOSITORY: Final = _Answer(
    "bad_request", 400, "repository.full_name: must be 'owner/name'\n"
)
# What a genuine delivery (Gitea's and Forgejo's "application/json" hooks) carries.
JSON: Final = "application/json"
_SPECIFIC = {"repo": 0, "org": 1, "global": 2}


async def candidate_secrets(
    repository: Repository | None,
    groups: Iterable[GroupDescriptor],
    provider: SecretProvider | None,
) -> list[tuple[GroupDescriptor, bytes]]:
    """The per-group secrets that may vouch for a delivery about ``repository``: those of the
    groups whose scope covers it. Each Secret is fetched once, concurrently."""
    if repository is None or provider is None:
        return []
    eligible = [g for g in groups if g.webhook_secret is not None and scope_covers(g, repository)]
    # The most specific scopes first, and a bounded number of distinct secrets: a tenant
    # cannot make every forged delivery cost hundreds of HMACs by creating groups.
    eligible.sort(key=lambda g: (_SPECIFIC.get(g.scope.value, 3), g.key))
    locations = list(dict.fromkeys(g.webhook_secret for g in eligible if g.webhook_secret))
    locations = locations[:MAX_CANDIDATE_SECRETS]
    values = await asyncio.gather(*(provider(where) for where in locations))
    by_location: dict[SecretLocation, bytes | None] = dict(zip(locations, values, strict=True))
    out: list[tuple[GroupDescriptor, bytes]] = []
    for group in eligible:
        assert group.webhook_secret is not None
        value = by_location.get(group.webhook_secret)
        if value:
            out.append((group, value))
    return out


class WebhookServer:
    """An aiohttp server for Gitea's webhooks.

    ``groups`` lists the current RunnerGroups (called once per delivery); ``wake`` asks one
    group (by key) for an immediate, coalesced refresh and must return at once;
    ``group_secret`` fetches a group's hook secret (inject a cache); ``on_delivery`` counts
    outcomes for metrics; ``active`` is False on a standby replica, which then answers 503;
    ``known(key, job_id)`` says whether the group's latest answer already lists a queued job
    (its delivery then wakes nobody), ``asking(key)`` whether the group's refresh is in
    flight (a delivery then waits for its answer): see ``WakeLimiter``. ``penalty_delay``:
    how late the 429 of an address with too many failed authentications comes
    (``Penalties``). ``split`` says which of the routed groups another replica serves
    (``--sharding``: sharding/forwards.py), and ``forwarder`` hands the delivery to it."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        groups: Callable[[], Iterable[GroupDescriptor]],
        wake: Callable[[str], None],
        operator_secret: bytes | None = None,
        group_secret: SecretProvider | None = None,
        on_delivery: Callable[[str], None] | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        active: Callable[[], bool] | None = None,
        slots: int = DEFAULT_SLOTS,
        slot_wait: float = DEFAULT_SLOT_WAIT,
        wake_interval: float | None = None,
        read_deadline: float = DEFAULT_READ_DEADLINE,
        reads_per_client: int = DEFAULT_READS_PER_CLIENT,
        known: Callable[[str, int], bool] | None = None,
        asking: Callable[[str], bool] | None = None,
        connections: int = DEFAULT_CONNECTIONS,
        header_deadline: float = DEFAULT_HEADER_DEADLINE,
        penalty_delay: float = PENALTY_DELAY,
        split: Callable[[Sequence[str]], Split] | None = None,
        forwarder: Forwarder | None = None,
    ) -> None:
        self._active = active
        self.connections = Connections(connections, header_deadline)
        self._read_deadline = read_deadline
        self._reads = ReadGate(reads_per_client)
        self._slots = asyncio.Semaphore(slots)
        self._slot_wait = slot_wait
        self._deliveries = Deliveries()
        self.penalties = Penalties()
        self._penalty_delay = penalty_delay
        self._quiet = QuietLog(log)
        self._limited_wake = (
            WakeLimiter(wake, wake_interval, known=known, asking=asking)
            if wake_interval is not None
            else WakeLimiter(wake, known=known, asking=asking)
        )
        self._host = host
        self._port = port
        self._groups = groups
        self._wake = wake
        self._operator_secret = signature.hmac_key(operator_secret) if operator_secret else None
        self._group_secret = group_secret
        self._on_delivery = on_delivery
        self._max_body = max_body
        self._split = split
        self._forwarder = forwarder
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
        self._limited_wake.close()
        if self._forwarder is not None:
            await self._forwarder.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        answer = await self._deliver(request)
        if self._on_delivery is not None:
            try:
                self._on_delivery(answer.outcome)
            except Exception:
                log.exception("webhook outcome callback failed")
        return web.Response(status=answer.status, text=answer.text or None)

    async def _deliver(self, request: web.Request) -> _Answer:
        event = request.headers.get(EVENT_HEADER, "")
        if self._active is not None and not self._active():
            # A standby knows no groups, so every group secret would look wrong: say what is
            # true instead of 401. Polling (on the leader) still finds the job.
            return _STANDBY
        if request.content_length is not None and request.content_length > self._max_body:
            self._quiet("webhook delivery too large", remote=request.remote, gitea_event=event)
            return _TOO_LARGE
        digest = signature.parse_signature(request.headers.get(signature.SIGNATURE_HEADER))
        if digest is None:
            self._quiet("webhook delivery unsigned", remote=request.remote, gitea_event=event)
            return _UNAUTHORIZED
        if request.content_type != JSON:
            # Refused unread: a body Gitea never sends would fail ``parse_body`` anyway.
            self._quiet("webhook delivery not JSON", remote=request.remote, gitea_event=event)
            return _UNSUPPORTED
        if self._hint_only(request) and self.penalties.exhausted(request.remote or ""):
            await self.penalties.refuse(request.remote or "", self._penalty_delay)
            return _PENALISED  # unread: only the hint could find its secret
        received = await self._receive(request, event)
        if isinstance(received, _Answer):
            return received
        # A slot only now that the body is in: what waits for one costs CPU only.
        try:
            async with asyncio.timeout(self._slot_wait):
                await self._slots.acquire()
        except TimeoutError:
            return _BUSY
        try:
            verified = await self._verify(request, received, digest, event)
        finally:
            self._slots.release()
        if isinstance(verified, _Answer):
            if verified.status in (400, 401):
                self.penalties.failed(request.remote or "")
            elif verified is _PENALISED:  # late, but holding no slot
                await self.penalties.refuse(request.remote or "", self._penalty_delay)
            return verified
        body, authorised = verified
        if not self._deliveries.first_time(request.headers.get(DELIVERY_HEADER)):
            return _DUPLICATE  # Gitea's redelivery, or a replay: woken already
        try:
            payload = parse_body(body)
        except Malformed as exc:
            return _Answer("bad_request", 400, f"{exc}\n")

        if event != "workflow_job":
            return _Answer("ignored", 204)
        try:
            delivery = parse_job_delivery(payload)
        except BadDelivery as exc:
            log.info("webhook delivery malformed", gitea_event=event, problem=str(exc))
            return _Answer("bad_request", 400, f"{exc}\n")
        if delivery.action not in WAKE_ACTIONS:
            return _Answer("ignored", 204)

        keys = route(delivery, authorised)
        where = self._where(request, keys)
        for address, served in where.peers.items():
            assert self._forwarder is not None  # _where forwards nothing without one
            forwarded = self._forwarder.send(address, request.path_qs, body, _passed_on(request))
            log.debug("webhook delivery forwarded", peer=address, groups=served, sent=forwarded)
        job = delivery.job_id if delivery.action == "queued" else None
        woken: list[str] = []
        for key in where.here:
            try:
                if self._limited_wake(key, job):
                    woken.append(key)
            except Exception:
                log.exception("waking a RunnerGroup failed", group=key)
        log.debug(
            "webhook delivery accepted",
            action=delivery.action,
            job_id=delivery.job_id,
            repository=delivery.repository.full_name,
            labels=list(delivery.labels),
            woken=woken,
            elsewhere=(elsewhere := len(keys) - len(where.here)),
        )
        text = _explain(len(keys), delivery.repository, authorised)
        if elsewhere:
            text = text.rstrip("\n") + f"; {elsewhere} of them served by other replicas\n"
        return _Answer("accepted", 202, text)

    def _where(self, request: web.Request, keys: list[str]) -> Split:
        """Which of ``keys`` to wake here and which to forward to whom. A forwarded delivery
        is woken here whatever this replica knows: it is never forwarded twice."""
        if self._split is None or self._forwarder is None or FORWARDED_HEADER in request.headers:
            return Split(tuple(keys))
        try:
            return self._split(keys)
        except Exception:  # the peers' view must never cost the delivery its local wake-ups
            log.exception("finding which replica serves a delivery's groups failed")
            return Split(tuple(keys))

    def _hint_only(self, request: web.Request) -> bool:
        """Whether only the repository hint could find who signed this delivery: no
        operator-wide secret, and no managed hook's ``?group=``."""
        return self._operator_secret is None and "group" not in request.query

    async def _receive(self, request: web.Request, event: str) -> bytes | _Answer:
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
            return _TOO_LARGE
        except TimeoutError:
            self._quiet("webhook delivery body not received in time", remote=peer)
            return _SLOW
        except ConnectionError:
            self._quiet("webhook client went away before its delivery was read", remote=peer)
            return _GONE
        finally:
            if ticket is not None:
                self._reads.leave(ticket)

    async def _verify(
        self, request: web.Request, body: bytes, digest: bytes, event: str
    ) -> _Answer | tuple[bytes, list[GroupDescriptor]]:
        """Find who signed the body, cheapest first: the operator-wide secret
        (one HMAC, nothing parsed), then the group a managed hook's URL names (one more),
        and only then the groups whose scope covers the repository the body's first 64 KiB
        name. Returns the body and the groups the signer may wake."""
        groups = list(self._groups())
        if self._operator_secret is not None and await signers(
            [(True, self._operator_secret)], body, digest
        ):
            return body, groups
        named = request.query.get("group")
        if named is not None:
            group = next((g for g in groups if g.key == named), None)
            secret = (
                await self._group_secret(group.webhook_secret)
                if group is not None
                and group.webhook_secret is not None
                and self._group_secret is not None
                else None
            )
            if group is not None and secret and await signers([(True, secret)], body, digest):
                return body, [g for g in groups if g.webhook_secret == group.webhook_secret]
            self._quiet("webhook delivery rejected", remote=request.remote, gitea_event=event)
            return _UNAUTHORIZED
        if not any(g.webhook_secret is not None for g in groups):
            self._quiet("webhook delivery rejected", remote=request.remote, gitea_event=event)
            return _UNAUTHORIZED
        if self.penalties.exhausted(request.remote or ""):
            return _PENALISED  # one HMAC was tried; the hint is what a flood must not buy
        repository = repository_hint(body)
        if repository is None:
            return _NOT_A_REPOSITORY
        candidates = await candidate_secrets(repository, groups, self._group_secret)
        signed_by = await signers(candidates, body, digest)
        if not signed_by:
            self._quiet(
                "webhook delivery rejected: no configured secret produced its signature",
                remote=request.remote,
                gitea_event=event,
                repository=repository.full_name,
            )
            return _UNAUTHORIZED
        vouched = {g.key for g in signed_by}
        return body, [g for g in groups if g.key in vouched]


def _passed_on(request: web.Request) -> dict[str, str]:
    """The headers a peer's receiver reads, as Gitea sent them."""
    names = (EVENT_HEADER, DELIVERY_HEADER, signature.SIGNATURE_HEADER)
    sent = {name: request.headers[name] for name in names if name in request.headers}
    return {**sent, "Content-Type": JSON}


def _explain(woken: int, repository: Repository, authorised: list[GroupDescriptor]) -> str:
    """A line for Gitea's delivery history; names no group (the sender may be any tenant)."""
    text = f"woke {woken} RunnerGroup(s)"
    if (
        woken == 0
        and authorised
        and not any(same_instance(repository, g.gitea_url) for g in authorised)
    ):
        text += (
            "; this instance's ROOT_URL (from repository.html_url) matches no group's"
            " spec.gitea.url"
        )
    return text + "\n"
