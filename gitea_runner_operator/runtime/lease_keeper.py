"""The Lease kept from a thread of its own (runtime/leadership.py says which rules it follows).

The Lease does not share the event loop's fate. The loop serves every group, the probes and
``/metrics``; whatever holds it for a few seconds (a large parse, a render) would also hold
the renewals, cost leadership and a re-list of every informer. So :class:`LeaseKeeper` runs
the elector on a thread with its own event loop and its own API client, and renews only
while the main loop's heartbeat (the loop watch's wake-ups) is younger than
``heartbeat_limit``: a slow loop keeps its leadership, a wedged one stops renewing and
another replica takes over.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Generic, Protocol, TypeVar

import structlog

from gitea_runner_operator.kube.http import LEASE_TIMEOUT
from gitea_runner_operator.reconcile.shards import Published
from gitea_runner_operator.runtime.membership import MembershipLeases
from gitea_runner_operator.settings import Settings

log = structlog.get_logger(__name__)

K = TypeVar("K")  # what a Lease thread keeps the Lease with (an elector, a member's Lease)


class Elector(Protocol):
    """One Lease's holder-to-be (runtime/leadership.LeaseElector)."""

    async def try_acquire_or_renew(self) -> bool: ...

    async def release(self) -> None: ...


@dataclass(frozen=True, slots=True)
class LeaseTiming:
    """Seconds. ``heartbeat_limit``: a main-loop heartbeat older than this stops renewals
    (and acquisitions), because that loop could no longer act on what the Lease allows."""

    lease_duration: float
    renew_deadline: float
    retry_period: float
    heartbeat_limit: float

    @classmethod
    def of(cls, settings: Settings) -> LeaseTiming:
        # A few seconds' stall must not cost a renewal, and a wedged loop must stop renewing
        # well before the lease would lapse: two retry periods inside the renew deadline,
        # at least half of it.
        deadline = float(settings.renew_deadline)
        return cls(
            lease_duration=float(settings.lease_duration),
            renew_deadline=deadline,
            retry_period=float(settings.retry_period),
            heartbeat_limit=max(deadline / 2, deadline - 2 * settings.retry_period),
        )


LEADING: Final = "leading"
LOST: Final = "lost"
FAILED: Final = "failed"  # the thread has ended: nobody renews or acquires any more


class LeaseThreadFailed(RuntimeError):
    """The Lease thread ended on an error (its log line says which)."""


# Seconds the close waits for the thread: a call under way, then the release (a read and an
# update), each within its own LEASE_TIMEOUT.
JOIN_TIMEOUT: Final = 3 * LEASE_TIMEOUT


class _LeaseThread(Generic[K]):
    """A thread with an event loop of its own that keeps one Lease: started from the main
    loop, woken or stopped from it, renewing only while the main loop's heartbeat is fresh.
    ``open_lease`` makes what keeps the Lease (with its own API client) on that thread's
    loop: an aiohttp session belongs to one loop. Subclasses say what keeping means
    (:meth:`_keep`) and what state they add (:meth:`_setup`)."""

    thread_name: ClassVar[str] = "lease"

    def __init__(
        self,
        open_lease: Callable[[], AbstractAsyncContextManager[K]],
        timing: LeaseTiming,
        heartbeat_age: Callable[[], float],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._open = open_lease
        self._timing = timing
        self._heartbeat_age = heartbeat_age
        self._clock = clock
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._main: asyncio.AbstractEventLoop | None = None
        self._own_loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self.renewals = 0
        self.stale_skips = 0  # renewals not attempted for a stale heartbeat
        self._setup()

    def _setup(self) -> None:
        """The subclass's own state."""

    def start(self) -> None:
        self._main = asyncio.get_running_loop()
        self._thread = threading.Thread(
            target=self._thread_main, name=self.thread_name, daemon=True
        )
        self._thread.start()

    async def close(self) -> None:
        """Stop renewing, let the thread end its keeping, and wait (bounded) for it."""
        self._stopping.set()
        loop, wake = self._own_loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # its loop already closed
                loop.call_soon_threadsafe(wake.set)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, JOIN_TIMEOUT)

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._run())
        except Exception as exc:  # never silent: without this thread nobody renews
            log.error("the Lease thread failed", lease=self.thread_name, error=repr(exc))
            self._failed()

    async def _run(self) -> None:
        self._wake = asyncio.Event()
        self._own_loop = asyncio.get_running_loop()
        if self._stopping.is_set():  # close() came before this loop existed
            self._wake.set()
        await self._keep()

    async def _keep(self) -> None:
        raise NotImplementedError

    def _failed(self) -> None:
        """The thread has ended on an error."""

    def _fresh(self) -> bool:
        return self._heartbeat_age() < self._timing.heartbeat_limit

    def _renewable(self) -> bool:
        """:meth:`_fresh`, said in the log and counted when not: a renewal skipped."""
        if self._fresh():
            return True
        self.stale_skips += 1
        log.warning(
            "the event loop has not woken in time; not renewing the Lease",
            lease=self.thread_name,
            heartbeat_age_s=round(self._heartbeat_age(), 1),
            limit_s=self._timing.heartbeat_limit,
        )
        return False

    async def _pause(self, seconds: float) -> None:
        assert self._wake is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)


class LeaseKeeper(_LeaseThread[Elector]):
    """Acquires and renews the leader Lease from a thread of its own, with its own event
    loop and the API client ``open_lease`` makes there.

    The main loop asks for a term (:meth:`term`), learns of a loss (:meth:`lost`) and ends
    with :meth:`close`, which releases the Lease if held. ``heartbeat_age`` tells how long
    ago the main loop last woke (:class:`~.loopwatch.LoopWatch`); it is read from the thread.
    """

    def _setup(self) -> None:
        self._want = threading.Event()  # the main loop is ready to act for a new term
        self._news: asyncio.Queue[str] | None = None

    # -- the main loop's side -----------------------------------------------------------------

    def start(self) -> None:
        self._news = asyncio.Queue()
        super().start()

    async def term(self, stop: asyncio.Event) -> bool:
        """Wait until this replica leads (True) or ``stop`` is set (False)."""
        assert self._news is not None, "start() first"
        self._want.set()
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                news = asyncio.ensure_future(self._news.get())
                await asyncio.wait([news, stopping], return_when=asyncio.FIRST_COMPLETED)
                if not news.done():
                    news.cancel()
                    break
                if news.result() == FAILED:
                    raise LeaseThreadFailed("the Lease thread has stopped")
                if news.result() == LEADING:
                    return True
            return False
        finally:
            stopping.cancel()

    async def lost(self) -> None:
        """Returns when the term that :meth:`term` began has ended without renewal."""
        assert self._news is not None, "start() first"
        while (news := await self._news.get()) not in (LOST, FAILED):
            pass
        if news == FAILED:
            self._news.put_nowait(FAILED)  # the next term() learns it too

    async def close(self) -> None:
        """Stop renewing, release the Lease if held, and wait (bounded) for the thread."""
        self._want.clear()
        await super().close()

    def _tell(self, news: str) -> None:
        if self._main is not None and self._news is not None:
            with contextlib.suppress(RuntimeError):  # the main loop has closed
                self._main.call_soon_threadsafe(self._news.put_nowait, news)

    # -- the thread's side --------------------------------------------------------------------

    def _failed(self) -> None:
        self._tell(FAILED)

    async def _keep(self) -> None:
        async with self._open() as elector:
            leading = False
            while not self._stopping.is_set():
                if not (self._want.is_set() and self._fresh()):
                    await self._pause(self._timing.retry_period)
                    continue
                if not await elector.try_acquire_or_renew():
                    await self._pause(self._timing.retry_period)
                    continue
                self._want.clear()
                leading = True
                self._tell(LEADING)
                if await self._renew(elector):
                    leading = False
                    self._tell(LOST)
            if leading:
                await elector.release()

    async def _renew(self, elector: Elector) -> bool:
        """Renew every ``retry_period`` while the heartbeat is fresh; True once no renewal
        succeeded for ``renew_deadline`` (the term is lost), False when closing."""
        timing = self._timing
        last = self._clock()
        while True:
            await self._pause(timing.retry_period)
            if self._stopping.is_set():
                return False
            budget = timing.renew_deadline - (self._clock() - last)
            renewed = False
            if budget > 0 and self._renewable():
                with contextlib.suppress(TimeoutError):
                    renewed = await asyncio.wait_for(elector.try_acquire_or_renew(), budget)
            if renewed:
                last = self._clock()
                self.renewals += 1
            elif self._clock() - last >= timing.renew_deadline:
                return True


class MemberKeeper(_LeaseThread[MembershipLeases]):
    """Renews this replica's membership Lease (runtime/membership.py) from a thread of its
    own, every ``retry_period`` while the main loop's heartbeat is fresh, as the leader
    Lease is kept: a main loop held for seconds by a burst of work must not miss the renew
    deadline and hand every domain over, while a wedged one stops renewing.

    The main loop (runtime/sharding.py) writes through it too, when it publishes a new
    record (:meth:`renew`), so that one task writes the Lease and every write carries the
    record last published. It reads the time of the last renewal (:meth:`renewed_at`, asked
    time on the monotonic clock, shared by both threads) for its step-down deadline.
    Renewals begin with the main loop's first write and end with an eviction (another
    replica deleted the Lease: only a new publication may write it again) or a release.
    """

    thread_name = "member-lease"

    def _setup(self) -> None:
        self._ready: asyncio.Future[None] | None = None  # the thread's Lease client is open
        self._leases: MembershipLeases | None = None
        self._lock: asyncio.Lock | None = None  # one write at a time (the thread's loop)
        self._published: Published | None = None
        self._renewed_at: float | None = None
        self._evicted = False
        self.active = False  # renewing: written by the main loop once, not evicted since

    # -- the main loop's side -----------------------------------------------------------------

    def start(self) -> None:
        self._ready = asyncio.get_running_loop().create_future()
        super().start()

    def renewed_at(self) -> float | None:
        return self._renewed_at

    def evicted(self) -> bool:
        """Whether a renewal found the Lease deleted by another replica since the last ask
        (MembershipLeases.evicted); renewals have stopped until the next :meth:`renew`."""
        evicted, self._evicted = self._evicted, False
        return evicted

    async def renew(self, published: Published | None) -> bool:
        """Write the Lease now with ``published`` (when given) as the record from now on;
        True when the write went through. Starts the periodic renewals."""
        return bool(await self._on_thread(self._write(published, start=True)))

    async def release(self) -> None:
        """Stop renewing and delete the Lease (MembershipLeases.release)."""
        self.active = False
        await self._on_thread(self._release())

    async def _on_thread(self, call: Coroutine[Any, Any, Any]) -> Any:
        assert self._ready is not None, "start() first"
        try:
            await asyncio.shield(self._ready)
        except BaseException:
            call.close()  # never to run: the thread's client did not open
            raise
        assert self._own_loop is not None
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call, self._own_loop))

    def _opened(self, error: BaseException | None = None) -> None:
        def tell() -> None:
            if self._ready is not None and not self._ready.done():
                if error is None:
                    self._ready.set_result(None)
                else:
                    self._ready.set_exception(LeaseThreadFailed(repr(error)))

        if self._main is not None:
            with contextlib.suppress(RuntimeError):  # the main loop has closed
                self._main.call_soon_threadsafe(tell)

    # -- the thread's side --------------------------------------------------------------------

    def _failed(self) -> None:
        self._opened(LeaseThreadFailed("the membership Lease thread has stopped"))

    async def _keep(self) -> None:
        async with self._open() as leases:
            self._leases, self._lock = leases, asyncio.Lock()
            self._opened()
            while not self._stopping.is_set():
                await self._pause(self._timing.retry_period)
                if self._stopping.is_set() or not self.active or not self._renewable():
                    continue
                await self._write(None, start=False)

    async def _write(self, published: Published | None, *, start: bool) -> bool:
        assert self._leases is not None and self._lock is not None
        async with self._lock:
            if not (start or self.active):  # released or evicted while this one waited
                return False
            if published is not None:
                self._published = published
            asked = self._clock()
            renewed = await self._leases.renew(self._published)
            if self._leases.evicted():
                self._evicted, self.active = True, False
                return False
            if renewed:
                self._renewed_at, self.active = asked, True
                self.renewals += 1
            return renewed

    async def _release(self) -> None:
        assert self._leases is not None and self._lock is not None
        async with self._lock:
            self.active = False
            await self._leases.release()
