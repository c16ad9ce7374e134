"""The dispatch stage: a routed delivery's groups are woken here (paced: wakes.py) or, for
those another replica serves (``--sharding``), the delivery is handed to it
(forwarding.py). A forwarded delivery is woken here whatever this replica knows: it is
never forwarded twice."""

from __future__ import annotations

import structlog
from aiohttp import web

from gitea_runner_operator.sharding.forwards import Split
from gitea_runner_operator.webhook import signature
from gitea_runner_operator.webhook.answers import DELIVERY_HEADER, EVENT_HEADER, JSON, Answer
from gitea_runner_operator.webhook.forwarding import FORWARDED_HEADER, Forwarder
from gitea_runner_operator.webhook.ports import Operator
from gitea_runner_operator.webhook.routing import (
    GroupDescriptor,
    Repository,
    Routed,
    covers_repository,
    same_instance,
)
from gitea_runner_operator.webhook.wakes import WAKE_INTERVAL, WakeLimiter

log = structlog.get_logger(__name__)


class Dispatcher:
    """``forwarder``: set with ``--sharding``, where a delivery's groups may be served by
    another replica."""

    def __init__(
        self,
        operator: Operator,
        forwarder: Forwarder | None = None,
        wake_interval: float = WAKE_INTERVAL,
    ) -> None:
        self._operator = operator
        self._forwarder = forwarder
        self.wakes = WakeLimiter(
            operator.wake, wake_interval, known=operator.knows, asking=operator.asking
        )

    async def dispatch(
        self, request: web.Request, body: bytes, routed: Routed, authorised: list[GroupDescriptor]
    ) -> Answer:
        delivery, keys = routed.delivery, routed.keys
        where = await self._where(request, keys)
        for address, served in where.peers.items():
            self._forward(request, body, address, served)
        job = delivery.job_id if delivery.action == "queued" else None
        self._vouch(keys, authorised, delivery.repository, job)
        woken: list[str] = []
        for key in where.here:
            try:
                if self.wakes(key, job):
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
        return Answer("accepted", 202, text)

    def _forward(
        self, request: web.Request, body: bytes, address: str, served: tuple[str, ...]
    ) -> None:
        """Hand the delivery to the replica serving ``served``. Each group's wake-up token is
        spent here first, as a wake-up here would spend it: a tenant's flood of signed
        deliveries leaves as at most its groups' wake-ups. Its slot is counted against the
        groups' namespaces (forwarding.Forwarder). A forward that fails wakes the groups
        here: queued, they are polled at once should this replica take them over."""
        forwarder = self._forwarder
        assert forwarder is not None  # _where forwards nothing without one
        paced = [key for key in served if self.wakes.spend(key)]
        if not paced:
            forwarder.paced()
            log.debug("webhook delivery not forwarded: its groups were woken lately", peer=address)
            return
        namespaces = frozenset(key.partition("/")[0] for key in paced)

        def failed() -> None:  # said by the forwarder's own line (rate-limited) and metric
            for key in paced:
                self._operator.wake(key)

        forwarded = forwarder.send(
            address,
            request.path_qs,
            body,
            _passed_on(request),
            namespaces=namespaces,
            on_failed=failed,
        )
        log.debug("webhook delivery forwarded", peer=address, groups=served, sent=forwarded)

    def _vouch(
        self,
        keys: list[str],
        authorised: list[GroupDescriptor],
        repository: Repository,
        job: int | None,
    ) -> None:
        """Tell each group with a webhook of its own that a verified delivery for its scope
        arrived (api/cadence.py): the groups it wakes, and those whose scope covers its
        repository though their labels do not fit the job (their hook works all the same).
        A group another replica serves is not polled here: the port ignores it."""
        vouched = dict.fromkeys(keys)
        for group in authorised:
            if group.webhook_secret is not None and covers_repository(group, repository):
                vouched.setdefault(group.key)
        for key in vouched:
            try:
                self._operator.heard(key, job)
            except Exception:
                log.exception("recording a delivery for a RunnerGroup failed", group=key)

    async def _where(self, request: web.Request, keys: list[str]) -> Split:
        """Which of ``keys`` to wake here and which to forward to whom."""
        if self._forwarder is None or FORWARDED_HEADER in request.headers:
            return Split(tuple(keys))
        try:
            return await self._operator.split(keys)
        except Exception:  # the peers' view must never cost the delivery its local wake-ups
            log.exception("finding which replica serves a delivery's groups failed")
            return Split(tuple(keys))

    async def close(self) -> None:
        self.wakes.close()
        if self._forwarder is not None:
            await self._forwarder.close()


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
