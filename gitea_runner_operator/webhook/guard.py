"""The guard stage: what keeps the webhook receiver cheap to attack. The receiver is
reachable by anyone who can reach the Service, and must not let a flood of forged
deliveries stall the event loop (and with it the Lease and every group's polling).

- A body is read before any slot is taken, within ``DEFAULT_READ_DEADLINE`` (408 past it);
  at most ``DEFAULT_READS_PER_CLIENT`` bodies per peer address and ``DEFAULT_READS`` in all
  are read at once, one more giving up the oldest read (:class:`ReadGate`, 408): silent
  connections hold nothing a genuine delivery needs, from many addresses or from a proxy's
  one. Connections themselves are bounded in number and given a deadline for their
  headers (``connections.py``).
  A client that goes away mid-body is one quiet log line, never a traceback.
- Unauthenticated work is bounded: at most ``slots`` received deliveries are verified at
  once; a request that cannot get a slot within ``wait`` gets 429, never a 5xx and never
  unbounded queueing.
- Verification comes before parsing wherever the secret can be chosen without the body; else
  only a bounded prefix is read to pick the candidate secrets (verify.py).
- Verified deliveries are de-duplicated by ``X-Gitea-Delivery`` (a bounded LRU); only after
  verification, so a forger cannot pre-empt a real delivery's id.
- Signatures over big bodies are computed off the event loop (hashlib releases the GIL), in
  one thread of their own (verify.py).
- Rejections are logged once, then summarised at most every ``QUIET_EVERY`` seconds with a
  count (:class:`QuietLog`): a flood must not become a flood of log lines.
- Failed authentication costs the sender's own lookups (:class:`Penalties`): each failure is
  charged to its address *and target* (the repository a delivery names, or a managed hook's
  ``?group=``), which has a burst of failures and then one a second; while a target has none
  left, deliveries from that address naming it are answered 429 before their secret is
  looked up. Gitea's deliveries all come from one address, so a tenant's hook with a wrong
  secret must cost only that tenant's own target: a delivery for another target from the
  same address is looked up as always. The address as a whole has a larger bucket, which
  bounds what a forger inventing targets can buy: past it, only targets that verified from
  that address before are looked up, and an address that never verified anything is
  answered 429 before its body is read. The operator-wide secret and a managed hook's
  ``?group=`` (one HMAC each) are always tried. So a forger's flood costs the HTTP exchange
  and little else (and its 429 comes a second late, so a forger that waits for answers
  sends fewer), and a genuine delivery is never refused for others' failures.
- Wake-ups per group are rate-limited (wakes.py): a tenant's own secret cannot make its
  groups poll Gitea more often than once a second on average.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final

import structlog

from gitea_runner_operator.kit.bucket import Bucket
from gitea_runner_operator.kit.lograte import LogRate
from gitea_runner_operator.kit.lru import LRU

log = structlog.get_logger(__name__)

# Gitea sends a delivery's body at once; a client still sending after this is not Gitea.
DEFAULT_READ_DEADLINE: Final = 10.0
# Bodies being received at once, per peer address and in all (each at most ``max_body``).
DEFAULT_READS_PER_CLIENT: Final = 4
DEFAULT_READS: Final = 64
DEFAULT_SLOTS: Final = 8
DEFAULT_SLOT_WAIT: Final = 2.0
DELIVERY_MEMORY: Final = 4096
QUIET_EVERY: Final = 10.0
# Failed authentications an address may have at once for one target, and how many a second
# after that (Penalties): Gitea with a wrong secret fails a delivery per job event, a forger
# hundreds.
PENALTY_BURST: Final = 20
PENALTY_RATE: Final = 1.0
# The same for an address over all its targets: what bounds a forger inventing targets.
PENALTY_ADDRESS_BURST: Final = 200
PENALTY_ADDRESS_RATE: Final = 5.0
PENALTY_ADDRESSES: Final = 4096
# A penalised delivery's 429 comes this late (a forger that waits for each answer sends
# fewer), for at most ``PENALTY_HELD`` requests per address at once (the rest at once), so
# held requests never fill the receiver's connections.
PENALTY_DELAY: Final = 1.0
PENALTY_HELD: Final = 4


class QuietLog:
    """Logs an event the first time, then at most every ``every`` seconds with the number
    of occurrences in between (``suppressed``): :class:`~..kit.lograte.LogRate` by event."""

    def __init__(
        self,
        logger: Any = None,
        every: float = QUIET_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger or structlog.get_logger(__name__)
        self._rate = LogRate(every, clock=clock)

    def __call__(self, event: str, **fields: Any) -> None:
        suppressed = self._rate.admit(event)
        if suppressed is not None:
            self._log.info(event, suppressed=suppressed, **fields)


class ReadGate:
    """Bodies being received: at most ``per_client`` per peer address and ``total`` in all
    (each at most ``max_body``: what bounds the memory of bodies in flight). One more makes
    room by giving up the oldest read, the peer's own when it is at its cap: a genuine
    delivery's body arrives with its headers and is read within milliseconds, so the reads
    given up are those of clients that send headers and then nothing. Before, one more was
    refused (429), and 64 such clients from 16 addresses, or 4 from a proxy's one address,
    held back every genuine delivery for as long as they kept their connections."""

    def __init__(
        self, per_client: int = DEFAULT_READS_PER_CLIENT, total: int = DEFAULT_READS
    ) -> None:
        self._per_client = max(1, per_client)
        self._total = max(1, total)
        # ticket -> (peer, how to give the read up), oldest first
        self._reads: OrderedDict[int, tuple[str, Callable[[], object]]] = OrderedDict()
        self._tickets = itertools.count()
        self.given_up = 0  # reads given up for a newer one, for tests and benchmarks

    def __len__(self) -> int:
        return len(self._reads)

    def enter(self, peer: str, give_up: Callable[[], object]) -> int:
        """Admit one more body from ``peer``; ``give_up`` ends this read early if a newer
        one needs its place. Returns the ticket to :meth:`leave` with."""
        own = [t for t, (p, _) in self._reads.items() if p == peer]
        if len(own) >= self._per_client:
            self._give_up(own[0])
        elif len(self._reads) >= self._total:
            self._give_up(next(iter(self._reads)))
        ticket = next(self._tickets)
        self._reads[ticket] = (peer, give_up)
        return ticket

    def leave(self, ticket: int) -> None:
        self._reads.pop(ticket, None)

    def _give_up(self, ticket: int) -> None:
        _, give_up = self._reads.pop(ticket)
        self.given_up += 1
        give_up()


class Penalties:
    """Failed authentications per (peer address, target) and per address, a token bucket
    each (``burst`` then ``rate`` a second; ``address_burst`` then ``address_rate``), and the
    targets that verified from each address. :meth:`exhausted` says whether a lookup is
    refused (module docstring). Bounded in count: the least recently failed (or verified)
    are forgotten first (their buckets would be full again by then)."""

    def __init__(
        self,
        rate: float = PENALTY_RATE,
        burst: int = PENALTY_BURST,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_addresses: int = PENALTY_ADDRESSES,
        address_rate: float = PENALTY_ADDRESS_RATE,
        address_burst: int = PENALTY_ADDRESS_BURST,
    ) -> None:
        self._rate = rate
        self._burst = max(1, burst)
        self._address_rate = address_rate
        self._address_burst = max(self._burst, address_burst)
        self._clock = clock
        self._buckets: LRU[tuple[str, str], Bucket] = LRU(max_addresses)
        self._addresses: LRU[str, Bucket] = LRU(max_addresses)
        self._verified: LRU[tuple[str, str], bool] = LRU(max_addresses)
        self._vouched: LRU[str, bool] = LRU(max_addresses)  # addresses that verified once
        self._held: dict[str, int] = {}

    async def refuse(self, peer: str, delay: float = PENALTY_DELAY) -> None:
        """Wait ``delay`` before a penalised answer, unless ``PENALTY_HELD`` of the peer's
        are waiting already."""
        held = self._held.get(peer, 0)
        if held >= PENALTY_HELD or delay <= 0:
            return
        self._held[peer] = held + 1
        try:
            await asyncio.sleep(delay)
        finally:
            left = self._held.pop(peer) - 1
            if left:
                self._held[peer] = left

    def exhausted(self, peer: str, target: str | None = None) -> bool:
        """Whether a lookup for ``target`` from ``peer`` is refused; ``target`` None: before
        the body is read, when only an address that never verified anything is refused."""
        now = self._clock()
        address = self._addresses.peek(peer)
        spent = address is not None and address.level(now) < 1.0
        if target is None:
            return spent and self._vouched.peek(peer) is None
        bucket = self._buckets.peek((peer, target))
        if bucket is not None and bucket.level(now) < 1.0:
            return True
        return spent and self._verified.peek((peer, target)) is None

    def failed(self, peer: str, target: str = "") -> None:
        """A delivery from ``peer`` naming ``target`` failed authentication."""
        now = self._clock()
        _spend(self._buckets, (peer, target), self._rate, self._burst, now)
        _spend(self._addresses, peer, self._address_rate, self._address_burst, now)

    def verified(self, peer: str, target: str = "") -> None:
        """A delivery from ``peer`` naming ``target`` verified: its target is looked up even
        while the address's failures are spent."""
        self._verified.put((peer, target), True)
        self._vouched.put(peer, True)


def _spend(buckets: LRU[Any, Bucket], key: object, rate: float, burst: int, now: float) -> None:
    bucket = buckets.get(key)
    if bucket is None:
        bucket = Bucket(rate, burst, now)
        buckets.put(key, bucket)
    bucket.refill(now)
    bucket.tokens = max(0.0, bucket.tokens - 1.0)


class Deliveries:
    """Verified delivery ids seen lately (bounded LRU)."""

    def __init__(self, size: int = DELIVERY_MEMORY) -> None:
        self._seen: LRU[str, bool] = LRU(size)

    def first_time(self, delivery_id: str | None) -> bool:
        """True the first time an id is seen (and for deliveries without one)."""
        if not delivery_id:
            return True
        delivery_id = delivery_id[:128]
        if self._seen.get(delivery_id):
            return False
        self._seen.put(delivery_id, True)
        return True
