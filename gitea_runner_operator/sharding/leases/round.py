"""``--sharding``: every replica acts, each on the capacity domains it holds
(sharding/tenure.py) by its membership Lease (sharding/leases/membership.py).

One round, every ``retry_period``: renew the Lease; read everyone's; plan. The plan's order
is the fencing rule's: groups it releases are closed to the workers first and their
in-flight reconciles finished and their Gitea tasks stopped (``release``), then the new
view is written, and groups it takes are handed to the work queue (``take``) only on a
later read. A replica that has not renewed within ``renew_deadline`` releases everything,
as the leader does (runtime/leadership.py). On a graceful stop it releases everything and
deletes its Lease, so the next owners start on their next round.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from gitea_runner_operator.kube.lease_thread import LeaseThreadFailed
from gitea_runner_operator.metrics import ShardingMetrics
from gitea_runner_operator.sharding.leases.ahead import ReadAhead
from gitea_runner_operator.sharding.leases.keeper import MemberKeeper
from gitea_runner_operator.sharding.leases.membership import MembershipLeases
from gitea_runner_operator.sharding.shapes import layout_of
from gitea_runner_operator.sharding.tenure import Arrivals, Layout, Reading, Step, Tenure, ahead

__all__ = ["SETTLE_READS", "Sharding", "layout_of"]

log = structlog.get_logger(__name__)

# Reads a replica that has never held a domain, and sees no other member, waits before it
# takes any (sharding/tenure.Tenure.settle_reads): about 6 s at the default 2 s period,
# time for replicas started with it to write their Leases.
SETTLE_READS = 3
# How long a taken domain's fetch (its Jobs and Pods, sharding/leases/share.py) may take in
# all, past the round that started it; past it the domain is released and taken afresh.
FETCH_TIMEOUT = 60.0
# Having published a view that gives it domains its peers do not give it yet, a replica
# reads again every eighth of the period, this many times in a row at most, instead of a
# period later: it takes them about one read after the last peer publishes the same view.
QUICK_READS = 8
# Past this many seconds before a peer's record would count as lapsed (its duration less
# the renew deadline, by default: a live peer renews every retry period, one that has not
# renewed within the deadline has stepped down), the domains it would leave to this
# replica are read ahead (sharding/leases/ahead.py).
READ_AHEAD = 5.0


class Sharding:
    """The rounds over the membership Leases: the domains this replica holds and whether it
    may still act on them. Asked through this replica's share (sharding/leases/share.py)."""

    def __init__(
        self,
        leases: MembershipLeases,
        layout: Callable[[], Layout],
        *,
        take: Callable[[frozenset[str]], None],
        release: Callable[[frozenset[str]], Awaitable[None]],
        prepare: Callable[[frozenset[str]], Awaitable[None]] | None = None,
        unprepare: Callable[[frozenset[str]], None] | None = None,
        settled: Callable[[], None] | None = None,
        keeper: MemberKeeper | None = None,
        metrics: ShardingMetrics | None = None,
        retry_period: float = 2.0,
        renew_deadline: float = 10.0,
        settle_reads: int = 0,
        fetch_timeout: float = FETCH_TIMEOUT,
        read_ahead: float = READ_AHEAD,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._leases = leases
        self._layout = layout
        self._take = take
        self._release = release
        self._prepare = prepare
        self._settled = settled  # after each round (the watches' buckets follow the held)
        # The thread that renews our Lease (sharding/leases/keeper.MemberKeeper); without it,
        # each round renews on this loop.
        self._keeper = keeper
        self._writer: MembershipLeases | MemberKeeper = keeper if keeper is not None else leases
        self._period = retry_period
        self._deadline = renew_deadline
        self._clock = clock
        self.tenure = Tenure(leases.identity, settle_reads=settle_reads)
        self._metrics = metrics
        if metrics is not None:
            metrics.bind(lambda: len(self.tenure.held))
        self._arrivals = Arrivals(leases.identity)  # for the hand-over seconds
        self._open: frozenset[str] = frozenset()  # groups the workers may reconcile
        # Fetches that outlived a round's budget (``_open_held``): each with its groups.
        self._fetch_timeout = fetch_timeout
        self._fetches: dict[asyncio.Future[None], frozenset[str]] = {}
        self._fetching: frozenset[str] = frozenset()
        self._renewed_at: float | None = None
        self._fenced = False  # acts_on has refused for a passed deadline since the renewal
        self.ahead = ReadAhead(prepare, unprepare)
        self._read_ahead = read_ahead
        self._next_read: float | None = None  # sooner than the period (:meth:`next_read_in`)
        self._quick = 0  # quick reads in a row

    def acts_on(self, key: str) -> bool:
        """Whether a worker may reconcile ``key`` now. Past the step-down deadline it may
        not, even before this loop has run to step down: a loop held up for seconds (a
        stalled event loop, a loaded node) must not let a worker act on a group whose
        Lease the others may already count as lapsed."""
        if key not in self._open:
            return False
        if self._budget() > 0:
            return True
        if not self._fenced:  # said once, with held=0, so the log tells who acted when
            self._fenced = True
            log.warning("renew deadline passed: acting on no group until renewed", held=0)
        return False

    def left(self, key: str) -> float:
        """Seconds until :meth:`acts_on` refuses ``key`` at the latest (its step-down
        deadline); 0 when it refuses already."""
        return max(0.0, self._budget()) if key in self._open else 0.0

    def _moved(self, reason: str, domains: frozenset[str]) -> bool:
        """Count domains that came or went (metrics/sharding.py); True when there were any."""
        if self._metrics is not None:
            self._metrics.moved(reason, len(domains))
        return bool(domains)

    async def _close(self, before: frozenset[str]) -> None:
        gone = before - self.tenure.groups()
        if gone:
            self._open &= self.tenure.groups()
            # Which groups, at debug level: the trail that shows who served a group when.
            log.debug("groups released", groups=sorted(gone))
            await self._release(gone)

    def _last_renewal(self) -> float | None:
        at = self._renewed_at
        kept = self._keeper.renewed_at() if self._keeper is not None else None
        if kept is not None and (at is None or kept > at):
            return kept
        return at

    def _budget(self) -> float:
        """Seconds until this replica must have stepped down, were its Lease not renewed."""
        at = self._last_renewal()
        if at is None:
            return self._deadline
        return self._deadline - (self._clock() - at)

    async def _within_budget(self, call: Awaitable[Any]) -> Any:
        """A Lease call cut at the step-down deadline: a slow API server must not keep a
        replica acting past it (None: cut)."""
        budget = self._budget()
        if budget <= 0:
            if asyncio.iscoroutine(call):
                call.close()
            return None
        try:
            return await asyncio.wait_for(call, budget)
        except TimeoutError:
            return None

    async def round(self) -> bool:
        """One renew, read and plan; True when it published a new record, after which a
        read may at once show what the new record allows (shards rule 3)."""
        # A renewal counts from when it was asked for, not from when its answer was read:
        # the others may have seen the renewed record that much earlier, and an answer read
        # late (a busy event loop) must not stretch the deadline past their lapse.
        asked = self._clock()
        if self._keeper is not None and self._keeper.active:
            renewed = self._budget() > 0  # the keeper's thread renews: read how recently
        else:  # each round, or the keeper's first write (and the first after an eviction)
            renew = self._writer.renew(self.tenure.current)
            # Holding nothing, there is no deadline to keep: the call's own timeout bounds it.
            renewed = await (self._within_budget(renew) if self.tenure.held else renew)
        evicted = self._writer.evicted()
        if renewed and not evicted:
            if self._keeper is None:  # the keeper's write counts in its renewed_at
                self._renewed_at = asked
            self._fenced = False
        elif evicted or self._budget() <= 0:  # not renewed in time: act on nothing
            if self._keeper is not None:  # its next write carries the record stepped down to
                self._keeper.active = False
            before = self.tenure.groups()
            self._arrivals.forget()
            self._next_read = None
            self.ahead.forget(frozenset())
            if self._moved("stepped_down", self.tenure.step_down()):
                log.warning(
                    "membership lease removed by another replica: serving no group"
                    if evicted
                    else "membership lease not renewed in time: serving no group",
                    held=0,
                )
            await self._close(before)
            return False
        reading = await self._within_budget(self._leases.read(self.tenure.publication))
        if reading is None:
            return False
        before = self.tenure.groups()
        layout = self._layout()
        self._arrivals.read(reading, layout, self._clock())
        step = self.tenure.plan(reading, layout)
        self._moved("released", step.release)
        if self._moved("taken", step.take):  # the hand-over's trail (docs/benchmarks.md)
            log.debug("domains to take", domains=len(step.take))
        await self._close(before)
        if step.release:
            log.info("gave domains away", released=len(step.release), held=len(self.tenure.held))
        published = False
        asked = self._clock()
        if step.publish is not None and await self._within_budget(self._writer.renew(step.publish)):
            self.tenure.published(step.publish)
            self._renewed_at = asked
            published = True
            log.debug("view published", members=len(step.publish.view))
        await self._open_held(len(step.take))
        self._look_ahead(reading, layout, step)
        return published

    def _look_ahead(self, reading: Reading, layout: Layout, step: Step) -> None:
        """Read ahead the domains this replica expects next, and say when to read again:
        when a peer's record falls due to lapse, or soon while peers are yet to publish the
        view this one published (the take waits for their agreement, rule 3)."""
        me, held = self.tenure.me, self.tenure.held
        fading = [m for m, left in reading.lapse_in.items() if left <= self._read_ahead]
        # Not while starting alone: peers starting too would take most of it a moment later
        # (the reason for Tenure.settle_reads), and the memory of that peak would stay.
        expected = ahead(me, reading, layout, held, fading) if held or reading.fresh else set()
        self.ahead.follow(frozenset(expected), layout, self.tenure.groups())
        due = [left for left in reading.lapse_in.values() if left < self._period]
        self._next_read = min(due) + 0.02 if due else None  # read begun once it is due
        waiting = (
            bool(reading.fresh)
            and step.publish is None
            and not step.take
            and bool(ahead(me, reading, layout, held, ()))
        )
        self._quick = self._quick + 1 if waiting else 0
        if waiting and self._quick <= QUICK_READS:
            log.debug("peers yet to agree with this view: reading again soon", reads=self._quick)
            quick = self._period / QUICK_READS
            self._next_read = min(self._next_read or quick, quick)

    def next_read_in(self) -> float:
        """Seconds to wait before the next round."""
        budget = max(0.05, self._budget())
        pause = min(self._period, budget) if self.tenure.held else self._period
        return pause if self._next_read is None else min(pause, self._next_read)

    async def _open_held(self, taken: int) -> None:
        """Open to the workers the held groups not open yet, once ``prepare`` has fetched
        what they need (the cache's share of Jobs and Pods): a new owner's first pass must
        see the group whole.

        The round waits for the fetch until its renew budget runs out, no longer (it must
        renew); a fetch still under way then goes on in the background, bounded by
        :data:`FETCH_TIMEOUT`, and opens its groups when it ends (a slow API server used to
        cut every attempt at the budget, and the domain was held and never served). A fetch
        that failed or ran out releases its domains, which a later round takes afresh."""
        await self._fetch_ended()
        new = self.tenure.groups() - self._open - self._fetching
        if not new:
            return
        if self._prepare is None:
            self._opened(new, taken)
            return
        await self.ahead.settle(new, self._budget())
        log.debug("fetching the taken groups' Jobs and Pods", groups=len(new))
        fetch = asyncio.ensure_future(asyncio.wait_for(self._prepare(new), self._fetch_timeout))
        done, _ = await asyncio.wait({fetch}, timeout=max(0.0, self._budget()))
        if fetch in done:
            if fetch.cancelled() or fetch.exception() is not None:
                await self._drop_unfetched(new, fetch)
            else:
                self._opened(new, taken)
            return
        log.info("groups still being fetched: serving them once fetched", groups=len(new))
        self._fetching |= new
        self._fetches[fetch] = new
        fetch.add_done_callback(functools.partial(self._fetched, new, taken))

    def _fetched(self, keys: frozenset[str], taken: int, fetch: asyncio.Future[None]) -> None:
        """A background fetch ended: on success its groups still held open at once; a
        failure is dealt with by the next round (:meth:`_fetch_ended`)."""
        if fetch.cancelled() or fetch.exception() is not None:
            return
        self._fetches.pop(fetch, None)
        self._fetching -= keys
        held = keys & self.tenure.groups()
        if held - self._open:
            self._opened(held - self._open, taken)

    async def _fetch_ended(self) -> None:
        for fetch, keys in [(f, k) for f, k in self._fetches.items() if f.done()]:
            del self._fetches[fetch]
            self._fetching -= keys
            await self._drop_unfetched(keys, fetch)

    async def _drop_unfetched(self, keys: frozenset[str], fetch: asyncio.Future[None]) -> None:
        """Release the held domains of groups whose fetch failed: held and unserved, they
        would wait for nobody; a later round takes them again and fetches afresh."""
        error = "Cancelled" if fetch.cancelled() else type(fetch.exception()).__name__
        log.warning("groups not fetched; released to be taken again", error=error)
        before = self.tenure.groups()
        dropped = self.tenure.drop(keys)
        self._moved("released", dropped)
        await self._close(before)

    def _opened(self, new: frozenset[str], taken: int) -> None:
        self._open |= new
        opened = [d for d, keys in self.tenure.held.items() if keys & new]
        for seconds in self._arrivals.served(opened, self._clock()):
            if self._metrics is not None:
                self._metrics.waited(seconds)
        log.debug("groups taken", groups=sorted(new))
        self._take(new)
        log.info("serving domains", taken=taken, held=len(self.tenure.held))

    async def run(self, stop: asyncio.Event) -> None:
        try:
            again = False
            while not stop.is_set():
                # Having published, read once more at once instead of a period later: after
                # a lapse or a release the domains move a retry period sooner. Only once in
                # a row, so that records that keep changing cannot make it spin.
                again = await self.round() and not again
                if self._settled is not None:
                    self._settled()
                if again:
                    continue
                # While it holds domains, it wakes by its step-down deadline at the latest.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.next_read_in())
        finally:
            for fetch in self._fetches:
                fetch.cancel()
            self.ahead.forget(frozenset())
            before = self.tenure.groups()
            self._moved("stopping", self.tenure.step_down())
            with contextlib.suppress(Exception):
                await self._close(before)
            # Without its thread the Lease cannot be deleted (it lapses): the error that
            # ended the loop, not this one, is what the caller must see.
            with contextlib.suppress(LeaseThreadFailed):
                await self._writer.release()
