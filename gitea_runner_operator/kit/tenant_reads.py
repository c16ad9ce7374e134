"""What tenants' Gitea answers may cost the process's CPU: one read rate, shared by namespace.

Reading, parsing and processing an answer costs CPU in proportion to its bytes, on the event
loop and the interpreter every tenant's pickups share. Each answer and each tenant's memory
were bounded (forge/limits.py, kit/tenant_budget.py), but not how often: forty groups of one
tenant, each on a Gitea URL listing 4,000 queued jobs, polled every 5 s, had the operator
read about 5 MB/s and spend 0.15 of a core on them, beside every other tenant's work on the
same 2 cores (issue 45). A namespace is a tenant, and this is its share of that work:

- ``rate`` bytes a second (``--tenant-read-rate``) is divided equally among the namespaces
  that read in the last ``ACTIVE_FOR`` seconds; each has a bucket of its part, at most
  ``burst`` saved up. A namespace alone has the whole rate; among very many, each still has
  ``MIN_SHARE``: at 4 MiB/s among 1,000 namespaces an equal part is 4 KiB/s, and a tenant's
  one Forgejo job list of 4 MiB would hold its polls back for 17 minutes. So the sum is the
  rate, or ``MIN_SHARE`` for each namespace past its share, whichever is more.
- Every fetch is charged what it read (forge/observe.py), woken or not, whatever it ended in.
- A poll nobody woke starts only once its namespace is out of debt, and reserves what the
  namespace's last fetch read until its own is charged (poll/next_poll.py): the groups of a
  namespace then go one after another, not all at the moment the debt is repaid. So a
  tenant's polls stretch, nobody else's.
- A woken poll (a pickup) goes first, unless its namespace is more than ``burst`` in debt:
  else its own deliveries would be a way around the share.

The rate bounds the average; a namespace's burst bounds what it reads at once beyond it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from gitea_runner_operator.kit.bucket import Bucket

KIB: Final = 1024
# Every tenant's reads together: 4 MiB/s, some tenths of a core of parsing at most; a healthy
# poll reads a few KiB, a big organisation's queue of 1,000 jobs about 1 MiB.
DEFAULT_RATE: Final = 4096 * KIB
# What one namespace may read at once beyond its rate: 4 MiB, a few big queues.
BURST: Final = 4096 * KIB
# What each namespace reads a second at least, however many share the rate (or the rate, if
# less): a few big answers a minute.
MIN_SHARE: Final = 64 * KIB
# A namespace that read within this long counts as one of those sharing the rate.
ACTIVE_FOR: Final = 60.0
# How often the namespaces that stopped reading are let go (each call would be O(n)).
PRUNE_EVERY: Final = 5.0


class ReadShares:
    """The namespaces' buckets: created as a namespace first reads or asks, let go once it
    read nothing for ``ACTIVE_FOR`` and owes nothing, so memory follows the namespaces that
    poll."""

    def __init__(
        self,
        rate: float = DEFAULT_RATE,
        burst: float = BURST,
        *,
        active_for: float = ACTIVE_FOR,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate <= 0 or burst <= 0:
            raise ValueError("the tenant read rate and burst must be positive")
        self.rate, self.burst, self._active_for, self._clock = rate, burst, active_for, clock
        self._namespaces: dict[str, _Namespace] = {}
        self._pruned = clock()

    def share(self) -> float:
        """Bytes a second each namespace that reads gets now."""
        return max(self.rate / max(1, len(self._namespaces)), min(self.rate, MIN_SHARE))

    def charge(self, tenant: str, read: int) -> None:
        """A fetch of ``tenant`` read ``read`` bytes."""
        if not tenant:
            return
        namespace = self._namespace(tenant)
        namespace.bucket.tokens -= read
        namespace.last_read = read

    def wait(self, tenant: str, *, woken: bool = False) -> float:
        """Seconds until a poll of ``tenant`` may start (0: now). A woken one waits only
        while the namespace is more than a burst in debt."""
        if not tenant:
            return 0.0
        bucket = self._namespace(tenant).bucket
        floor = -self.burst if woken else 0.0
        return 0.0 if bucket.tokens >= floor else (floor - bucket.tokens) / bucket.rate

    def owed(self, tenant: str) -> float:
        """Bytes ``tenant`` is in debt (0: none)."""
        namespace = self._namespaces.get(tenant)
        if namespace is None:
            return 0.0
        return max(0.0, -namespace.bucket.refill(self._clock()))

    def reserve(self, tenant: str) -> int:
        """Hold what the namespace's last fetch read, for a poll that starts now; the
        amount, to :meth:`release` once the poll's own fetch was charged."""
        if not tenant:
            return 0
        namespace = self._namespace(tenant)
        namespace.bucket.tokens -= namespace.last_read
        return namespace.last_read

    def release(self, tenant: str, amount: int) -> None:
        if amount and (namespace := self._namespaces.get(tenant)) is not None:
            namespace.bucket.tokens += amount

    def __len__(self) -> int:
        """Namespaces with a bucket (tests, benchmarks)."""
        return len(self._namespaces)

    def _namespace(self, tenant: str) -> _Namespace:
        now = self._clock()
        if now - self._pruned >= PRUNE_EVERY:
            self._prune(now)
        namespace = self._namespaces.get(tenant)
        if namespace is None:
            bucket = Bucket(self.share(), self.burst, now)
            namespace = self._namespaces[tenant] = _Namespace(bucket)
        namespace.bucket.refill(now)  # at the rate until now (and now is when it was seen)
        namespace.bucket.rate = self.share()  # the share of the namespaces reading now on
        return namespace

    def _prune(self, now: float) -> None:
        self._pruned = now
        for tenant, namespace in list(self._namespaces.items()):
            bucket = namespace.bucket
            if now - bucket.at < self._active_for or bucket.refill(now) < 0:
                continue  # read lately, or owes: its debt is not forgiven for keeping still
            del self._namespaces[tenant]


@dataclass(slots=True)
class _Namespace:
    bucket: Bucket  # refilled whenever the namespace reads or asks: ``at`` is when it last did
    last_read: int = 0  # bytes of its last fetch: what a poll that starts holds
