"""The leader Lease kept from a thread of its own (runtime/leadership.py says which rules it
follows; kube/lease_thread.py says why a thread)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Final

from gitea_runner_operator.kube.lease_thread import Elector, LeaseThread, LeaseThreadFailed

__all__ = ["LeaseKeeper", "LeaseThreadFailed"]

LEADING: Final = "leading"
LOST: Final = "lost"
FAILED: Final = "failed"  # the thread has ended: nobody renews or acquires any more


class LeaseKeeper(LeaseThread[Elector]):
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
