"""This replica's membership Lease, renewed from a thread of its own (kube/lease_thread.py
says why a thread)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

import structlog

from gitea_runner_operator.kube.lease_thread import LeaseThread, LeaseThreadFailed
from gitea_runner_operator.sharding.leases.membership import MembershipLeases
from gitea_runner_operator.sharding.tenure import Published

log = structlog.get_logger(__name__)


class MemberKeeper(LeaseThread[MembershipLeases]):
    """Renews this replica's membership Lease (sharding/leases/membership.py) from a thread of its
    own, every ``retry_period`` while the main loop's heartbeat is fresh, as the leader
    Lease is kept: a main loop held for seconds by a burst of work must not miss the renew
    deadline and hand every domain over, while a wedged one stops renewing.

    The main loop (sharding/leases/round.py) writes through it too, when it publishes a new
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
