"""A Lease kept from a thread of its own, with an event loop and an API client of its own.

The Lease does not share the event loop's fate. The loop serves every group, the probes and
``/metrics``; whatever holds it for a few seconds (a large parse, a render) would also hold
the renewals, cost leadership (or a replica's domains) and a re-list of every informer. So
a Lease is renewed from a thread of its own, only while the main loop's heartbeat (the loop
watch's wake-ups) is younger than ``heartbeat_limit``: a slow loop keeps its Lease, a wedged
one stops renewing and another replica takes over. The leader Lease
(runtime/lease_keeper.LeaseKeeper) and a replica's membership Lease
(sharding/leases/keeper.MemberKeeper) are both kept on this base.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import ClassVar, Final, Generic, Protocol, TypeVar

import structlog

from gitea_runner_operator.kit.thread_names import name_this_thread
from gitea_runner_operator.kube.http import LEASE_TIMEOUT
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


class LeaseThreadFailed(RuntimeError):
    """The Lease thread ended on an error (its log line says which)."""


# Seconds the close waits for the thread: a call under way, then the release (a read and an
# update), each within its own LEASE_TIMEOUT.
JOIN_TIMEOUT: Final = 3 * LEASE_TIMEOUT


class LeaseThread(Generic[K]):
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
        name_this_thread()
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
