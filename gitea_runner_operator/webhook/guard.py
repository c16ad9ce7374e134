"""What keeps the webhook receiver cheap to attack: the receiver is reachable by anyone who
can reach the Service, and must not let a flood of forged deliveries stall the event loop
(and with it the Lease and every group's polling).

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
  only a bounded prefix is read to pick the candidate secrets (:func:`repository_hint`: at
  most ``MAX_HINT_TRIES`` decodes of at most ``PREFIX_BYTES`` each, whatever the body), and
  at most ``MAX_CANDIDATE_SECRETS`` distinct secrets are tried.
- Verified deliveries are de-duplicated by ``X-Gitea-Delivery`` (a bounded LRU); only after
  verification, so a forger cannot pre-empt a real delivery's id.
- Signatures over big bodies are computed off the event loop (hashlib releases the GIL), in
  one thread of their own: a flood then costs at most one core of hashing, and the event
  loop (the Lease, the polls) competes with one busy thread, not a pool of them.
- Rejections are logged once, then summarised at most every ``QUIET_EVERY`` seconds with a
  count (:class:`QuietLog`): a flood must not become a flood of log lines.
- Failed authentication costs the address it came from (:class:`Penalties`): past a burst
  of failures, an address has one a second. While it has none left, its deliveries are no
  longer read for the repository hint (the expensive way to find a secret): those only
  that way are answered 429 before their body is read; the operator-wide secret and a
  managed hook's ``?group=`` (one HMAC each) are still tried. So a forger's flood costs
  the HTTP exchange and little else (and its 429 comes a second late, so a forger that
  waits for answers sends fewer), a genuine delivery from another address is never
  delayed, and behind a proxy (one address for everyone) Gitea's managed and system hooks
  still get through; only hand-made hooks without ``?group=`` wait for the next poll.
- Wake-ups per group are rate-limited (:class:`WakeLimiter`): a tenant's own secret cannot
  make its groups poll Gitea more often than once per ``interval`` on average (a burst of
  ``WAKE_BURST`` at once); a wake-up beyond that is deferred until the next one is allowed
  (one trailing wake), never lost.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import json
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

import structlog

from gitea_runner_operator.kit.bucket import Bucket
from gitea_runner_operator.kit.jsonlimits import too_deep
from gitea_runner_operator.kit.lograte import LogRate
from gitea_runner_operator.kit.lru import LRU
from gitea_runner_operator.webhook import signature
from gitea_runner_operator.webhook.routing import Repository, parse_repository

T = TypeVar("T")
log = structlog.get_logger(__name__)

# A workflow_job payload names its repository after the job (a few KiB with its steps).
PREFIX_BYTES: Final = 64 * 1024
MAX_CANDIDATE_SECRETS: Final = 16
# A genuine payload's first ``"repository": {`` is the one routing reads; a few more tries
# only forgive oddities, and bound what a forged body can make us decode.
MAX_HINT_TRIES: Final = 4
# Gitea sends a delivery's body at once; a client still sending after this is not Gitea.
DEFAULT_READ_DEADLINE: Final = 10.0
# Bodies being received at once, per peer address and in all (each at most ``max_body``).
DEFAULT_READS_PER_CLIENT: Final = 4
DEFAULT_READS: Final = 64
DEFAULT_SLOTS: Final = 8
DEFAULT_SLOT_WAIT: Final = 2.0
DELIVERY_MEMORY: Final = 4096
WAKE_INTERVAL: Final = 1.0
# Wake-ups a group may get at once before the interval applies: Gitea sends the deliveries
# of one push one after the other over a few hundred milliseconds, and a job queued after
# the first wake-up's refresh started must not wait for the end of that second. A flood is
# still held to one wake-up a second on average.
WAKE_BURST: Final = 5
MAX_DEPTH: Final = 32
QUIET_EVERY: Final = 10.0
# Failed authentications an address may have at once, and how many a second after that
# (Penalties): Gitea with a wrong secret fails a delivery per job event, a forger hundreds.
PENALTY_BURST: Final = 20
PENALTY_RATE: Final = 1.0
PENALTY_ADDRESSES: Final = 4096
# A penalised delivery's 429 comes this late (a forger that waits for each answer sends
# fewer), for at most ``PENALTY_HELD`` requests per address at once (the rest at once), so
# held requests never fill the receiver's connections.
PENALTY_DELAY: Final = 1.0
PENALTY_HELD: Final = 4
# Bytes hashed per delivery above which the HMACs run in a thread, off the event loop.
OFFLOAD_BYTES: Final = 256 * 1024


_HASHING = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="webhook-hmac")


async def signers(candidates: Sequence[tuple[T, bytes]], body: bytes, digest: bytes) -> list[T]:
    """:func:`signature.matching`, off the event loop (in the one hashing thread) when the
    work is big."""
    if len(body) * max(1, len(candidates)) < OFFLOAD_BYTES:
        return signature.matching(candidates, body, digest)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_HASHING, signature.matching, candidates, body, digest)


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


class Malformed(ValueError):
    """The body is not a JSON object we can read (or nests absurdly deep)."""


def parse_body(body: bytes) -> Any:
    """The whole body, after verification; a malformed or deeply nested body is
    :class:`Malformed` (answered 400), never a RecursionError."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        raise Malformed("body: not JSON") from None
    if too_deep(payload, MAX_DEPTH):
        raise Malformed("body: nested too deeply")
    return payload


# ``"repository"`` as an object key: the quotes, optional blanks, a colon, an object.
_REPOSITORY_KEY: Final = re.compile(r'"repository"[ \t\r\n]*:[ \t\r\n]*(?=\{)')
_DECODER: Final = json.JSONDecoder()


def repository_hint(body: bytes) -> Repository | None:
    """The repository a delivery names, read from its first ``PREFIX_BYTES`` only: enough
    to pick which groups' secrets may have signed it. Never trusted beyond that: routing
    reads the verified whole body again.

    It runs before any signature is checked, so its cost must not depend on what a forger
    puts in the body: one regular-expression scan of the prefix, and at most
    ``MAX_HINT_TRIES`` decodes of an object found there (each bounded by the prefix)."""
    text = body[:PREFIX_BYTES].decode("utf-8", errors="ignore")
    for tries, match in enumerate(_REPOSITORY_KEY.finditer(text)):
        if tries >= MAX_HINT_TRIES:
            return None
        try:
            value, _ = _DECODER.raw_decode(text, match.end())
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict) and not too_deep(value, MAX_DEPTH):
            repository = parse_repository({"repository": value})
            if repository is not None:
                return repository
    return None


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
    """Failed authentications per peer address, a token bucket each (``burst`` at once, then
    ``rate`` a second): :meth:`exhausted` says an address has none left. Bounded in count: the
    least recently failed addresses are forgotten first (they would be full again by then)."""

    def __init__(
        self,
        rate: float = PENALTY_RATE,
        burst: int = PENALTY_BURST,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_addresses: int = PENALTY_ADDRESSES,
    ) -> None:
        self._rate = rate
        self._burst = max(1, burst)
        self._clock = clock
        self._buckets: LRU[str, Bucket] = LRU(max_addresses)
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

    def exhausted(self, peer: str) -> bool:
        bucket = self._buckets.peek(peer)
        return bucket is not None and bucket.level(self._clock()) < 1.0

    def failed(self, peer: str) -> None:
        now = self._clock()
        bucket = self._buckets.get(peer)
        if bucket is None:
            bucket = Bucket(self._rate, self._burst, now)
            self._buckets.put(peer, bucket)
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


class WakeLimiter:
    """At most ``burst`` wake-ups of a group at once and one per ``interval`` on average (a
    token bucket per group: client-go's BucketRateLimiter); one arriving when the group has
    no token left is deferred until the next token is due (coalesced), so the latest news
    still arrives. The first wake-up after a quiet interval is never delayed.

    Only news spends a token. Gitea delivers a job a few hundred milliseconds after queueing
    it, so the refresh woken by a push's first delivery often lists the jobs of the ones
    that follow: a delivery about a queued job the group's latest answer lists (``known``)
    wakes nobody; one that lands while the group's refresh is in flight (``asking``) waits
    for that answer (checked every ``RECHECK`` seconds, at most ``SETTLE_MAX``); and a
    deferred wake-up whose jobs are all listed by the time it is due is dropped."""

    RECHECK: Final = 0.02
    SETTLE_MAX: Final = 1.0
    # Job ids a due wake-up remembers to check against the group's answer; past this many
    # (a burst of signed deliveries within a second) it just wakes, so the set stays small.
    MAX_JOBS: Final = 64

    def __init__(
        self,
        wake: Callable[[str], None],
        interval: float = WAKE_INTERVAL,
        *,
        burst: int = WAKE_BURST,
        known: Callable[[str, int], bool] | None = None,
        asking: Callable[[str], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_groups: int = 100_000,
    ) -> None:
        self._wake = wake
        self._interval = interval
        self._burst = max(1, burst)
        self._known = known
        self._asking = asking
        self._clock = clock
        # Per group: its bucket as last spent. A group not listed has a full bucket; the least
        # recently woken go beyond ``max_groups`` (they are full again by then).
        self._buckets: LRU[str, Bucket] = LRU(max_groups)
        # Per group with a wake-up due: its timer, when the first of its deliveries came,
        # the queued jobs it is for (None: one that no listed job can answer), and whether
        # it waits for a refresh in flight (else for its token).
        self._deferred: dict[str, tuple[asyncio.TimerHandle, float, set[int] | None, bool]] = {}
        self.deferred = 0  # for tests and benchmarks
        self.dropped = 0  # deferred wake-ups whose jobs were all listed when due

    def _available(self, key: str, now: float) -> float:
        if self._interval <= 0:
            return float(self._burst)  # no limit (tests)
        bucket = self._buckets.peek(key)
        return float(self._burst) if bucket is None else bucket.level(now)

    def _ask(self, check: Callable[[], bool], key: str) -> bool:
        try:
            return check()
        except Exception:
            log.exception("checking a delivery's job failed", group=key)
            return False

    def _listed(self, key: str, job_id: int) -> bool:
        known = self._known
        return known is not None and self._ask(lambda: known(key, job_id), key)

    def _in_flight(self, key: str) -> bool:
        asking = self._asking
        return asking is not None and self._ask(lambda: asking(key), key)

    def __call__(self, key: str, job_id: int | None = None) -> bool:
        """Wake ``key`` now or later; ``job_id``: the queued job a delivery is about. False
        when it is no news (the group's latest answer lists that job)."""
        if job_id is not None and self._listed(key, job_id):
            return False
        due = self._deferred.get(key)
        if due is not None:  # a wake-up is already due: it answers this one too
            handle, since, jobs, parked = due
            if jobs is not None and job_id is not None and len(jobs) < self.MAX_JOBS:
                jobs.add(job_id)
            elif jobs is not None:  # no job id, or more than it is worth checking: wake
                self._deferred[key] = (handle, since, None, parked)
            return True
        now = self._clock()
        if job_id is not None and self._in_flight(key):
            self._defer(key, self.RECHECK, now, {job_id}, parked=True)
            return True
        self._spend(key, now, {job_id} if job_id is not None else None, now)
        return True

    def _spend(self, key: str, now: float, jobs: set[int] | None, since: float) -> None:
        tokens = self._available(key, now)
        if tokens >= 1.0:
            self._fire(key, now, tokens)
            return
        self.deferred += 1
        self._defer(key, (1.0 - tokens) * self._interval, since, jobs, parked=False)

    def _defer(
        self, key: str, delay: float, since: float, jobs: set[int] | None, *, parked: bool
    ) -> None:
        handle = asyncio.get_running_loop().call_later(delay, self._trailing, key)
        self._deferred[key] = (handle, since, jobs, parked)

    def _trailing(self, key: str) -> None:
        due = self._deferred.pop(key, None)
        if due is None:
            return
        _, since, jobs, parked = due
        if jobs is not None and all(self._listed(key, job) for job in jobs):
            self.dropped += 1
            return
        now = self._clock()
        if not parked:  # its token is due now
            self._fire(key, now, max(1.0, self._available(key, now)))
        elif jobs is not None and now - since < self.SETTLE_MAX and self._in_flight(key):
            self._defer(key, self.RECHECK, since, jobs, parked=True)  # no answer yet
        else:
            self._spend(key, now, jobs, since)

    def _fire(self, key: str, now: float, tokens: float) -> None:
        if self._interval > 0:  # else no limit (tests): nothing to remember
            rate = 1.0 / self._interval
            self._buckets.put(key, Bucket(rate, self._burst, now, tokens - 1.0))
        self._wake(key)

    def close(self) -> None:
        for handle, *_ in self._deferred.values():
            handle.cancel()
        self._deferred.clear()
