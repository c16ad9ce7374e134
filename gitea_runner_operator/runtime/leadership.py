"""Lease-based leader election around the controller, written to survive faults.

Rules, after client-go's leaderelection:
- Every Lease call has a timeout. A failed call (API server restarting, connection reset)
  is retried every ``retry_period``; it is not an exit.
- A leader that has not renewed for ``renew_deadline`` stops acting: its controller is
  cancelled, so it stops creating Jobs before the lease (``lease_duration``, longer) can
  expire and a standby can take over. Two leaders never act at once.
- Having stepped down, the process becomes a candidate again with a fresh controller (which
  re-lists everything) instead of exiting, so an API server restart does not turn into a
  crash loop of every replica.
- A standby takes an expired lease only after it has seen the same lease record unchanged
  for ``lease_duration`` on its own clock (clock skew between nodes does not matter).
- Updates carry the resourceVersion read (compare-and-swap), also when releasing on SIGTERM.

And one of this operator's own: the Lease does not share the event loop's fate. The loop
serves every group, the probes and ``/metrics``; whatever holds it for a few seconds (a
large parse, a render) would also hold the renewals, cost leadership and a re-list of every
informer. So the Lease is kept by :class:`LeaseKeeper`, a thread with its own event loop
and its own API client, which renews only while the main loop's heartbeat (the loop watch's
wake-ups) is younger than ``heartbeat_limit``: a slow loop keeps its leadership, a wedged
one stops renewing and another replica takes over, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Final

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.kit.clock import utc_now_micro
from gitea_runner_operator.kube.http import LEASE_TIMEOUT
from gitea_runner_operator.runtime.controller import Controller
from gitea_runner_operator.settings import Settings

log = structlog.get_logger(__name__)


@dataclass
class _Observed:
    record: tuple[Any, ...]
    at: float


class LeaseElector:
    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration: int = 15,
        call_timeout: float = LEASE_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
        leases: Any = None,
    ) -> None:
        # ``leases``: the Lease API itself (tests give a fake one); else built on ``api``.
        self._leases: Any = leases if leases is not None else client.CoordinationV1Api(api)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self._duration = lease_duration
        self._timeout = call_timeout
        self._clock = clock
        self._observed: _Observed | None = None

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; True when we hold the lease afterwards. Never raises for API or
        network trouble (that is simply "not renewed")."""
        try:
            return await self._attempt()
        except (ApiException, OSError, TimeoutError) as exc:
            log.warning("lease call failed", lease=self.name, error=type(exc).__name__)
            return False
        except Exception as exc:  # aiohttp's errors and the like
            log.warning("lease call failed", lease=self.name, error=type(exc).__name__)
            return False

    async def _attempt(self) -> bool:
        try:
            lease = await self._leases.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self._timeout
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            return await self._create()
        spec = lease.spec
        holder = spec.holder_identity if spec is not None else None
        record = (
            holder,
            str(spec.renew_time) if spec else None,
            lease.metadata.resource_version,
        )
        now = self._clock()
        if self._observed is None or self._observed.record != record:
            self._observed = _Observed(record, now)
        if holder and holder != self.identity:
            duration = (spec.lease_duration_seconds or self._duration) if spec else self._duration
            if now - self._observed.at < duration:
                return False  # someone else holds it and renewed within its duration
        body = self._body(
            lease.metadata.resource_version,
            {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self._duration,
                "renewTime": utc_now_micro(),
                "acquireTime": (
                    utc_now_micro()
                    if holder != self.identity or spec is None or spec.acquire_time is None
                    else spec.acquire_time.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                ),
                "leaseTransitions": ((spec.lease_transitions or 0) if spec else 0)
                + (0 if holder == self.identity else 1),
            },
        )
        try:
            await self._leases.replace_namespaced_lease(
                self.name, self.namespace, body, _request_timeout=self._timeout
            )
        except ApiException as exc:
            if exc.status == 409:
                return False  # someone else wrote it first
            raise
        return True

    def _body(self, resource_version: str | None, spec: dict[str, Any]) -> dict[str, Any]:
        """A Lease to write; with the resourceVersion read, so the write is a
        compare-and-swap that fails (409) if anyone wrote in between."""
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if resource_version is not None:
            metadata["resourceVersion"] = resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }

    async def _create(self) -> bool:
        body = self._body(
            None,
            {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self._duration,
                "acquireTime": utc_now_micro(),
                "renewTime": utc_now_micro(),
                "leaseTransitions": 0,
            },
        )
        try:
            await self._leases.create_namespaced_lease(
                self.namespace, body, _request_timeout=self._timeout
            )
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def release(self) -> None:
        """Give the Lease up if we hold it, so the next candidate need not wait for it to
        expire. Uses the resourceVersion it read: never clears a lease someone else took."""
        try:
            lease = await self._leases.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self._timeout
            )
            if lease.spec is None or lease.spec.holder_identity != self.identity:
                return
            body = self._body(
                lease.metadata.resource_version,
                {
                    "holderIdentity": None,
                    "leaseDurationSeconds": 1,
                    "leaseTransitions": lease.spec.lease_transitions or 0,
                },
            )
            await self._leases.replace_namespaced_lease(
                self.name, self.namespace, body, _request_timeout=self._timeout
            )
            log.info("released leadership")
        except Exception as exc:
            log.warning("could not release the Lease", error=type(exc).__name__)


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


class LeaseKeeper:
    """Acquires and renews the Lease from a thread of its own, with its own event loop and
    the API client ``open_elector`` makes there (an aiohttp session belongs to one loop).

    The main loop asks for a term (:meth:`term`), learns of a loss (:meth:`lost`) and ends
    with :meth:`close`, which releases the Lease if held. ``heartbeat_age`` tells how long
    ago the main loop last woke (:class:`~.loopwatch.LoopWatch`); it is read from the thread.
    """

    def __init__(
        self,
        open_elector: Callable[[], AbstractAsyncContextManager[LeaseElector]],
        timing: LeaseTiming,
        heartbeat_age: Callable[[], float],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._open = open_elector
        self._timing = timing
        self._heartbeat_age = heartbeat_age
        self._clock = clock
        self._want = threading.Event()  # the main loop is ready to act for a new term
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._main: asyncio.AbstractEventLoop | None = None
        self._news: asyncio.Queue[str] | None = None
        self._own_loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self.renewals = 0
        self.stale_skips = 0  # renewals not attempted for a stale heartbeat

    # -- the main loop's side -----------------------------------------------------------------

    def start(self) -> None:
        self._main = asyncio.get_running_loop()
        self._news = asyncio.Queue()
        self._thread = threading.Thread(target=self._thread_main, name="lease", daemon=True)
        self._thread.start()

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
        self._stopping.set()
        loop, wake = self._own_loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # its loop already closed
                loop.call_soon_threadsafe(wake.set)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, JOIN_TIMEOUT)

    def _tell(self, news: str) -> None:
        if self._main is not None and self._news is not None:
            with contextlib.suppress(RuntimeError):  # the main loop has closed
                self._main.call_soon_threadsafe(self._news.put_nowait, news)

    # -- the thread's side --------------------------------------------------------------------

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._keep())
        except Exception as exc:  # never silent: without this thread nobody renews
            log.error("the Lease thread failed", error=repr(exc))
            self._tell(FAILED)

    def _fresh(self) -> bool:
        return self._heartbeat_age() < self._timing.heartbeat_limit

    async def _pause(self, seconds: float) -> None:
        assert self._wake is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    async def _keep(self) -> None:
        self._wake = asyncio.Event()
        self._own_loop = asyncio.get_running_loop()
        if self._stopping.is_set():  # close() came before this loop existed
            self._wake.set()
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

    async def _renew(self, elector: LeaseElector) -> bool:
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
            if budget > 0 and not self._fresh():
                self.stale_skips += 1
                log.warning(
                    "the event loop has not woken in time; not renewing the Lease",
                    heartbeat_age_s=round(self._heartbeat_age(), 1),
                    limit_s=timing.heartbeat_limit,
                )
            elif budget > 0:
                with contextlib.suppress(TimeoutError):
                    renewed = await asyncio.wait_for(elector.try_acquire_or_renew(), budget)
            if renewed:
                last = self._clock()
                self.renewals += 1
            elif self._clock() - last >= timing.renew_deadline:
                return True


class Leadership:
    """The controller of the current term, for readiness checks and tests."""

    def __init__(self) -> None:
        self.controller: Controller | None = None
        self.standby = asyncio.Event()
        self.terms = 0


async def run_with_leadership(
    keeper: LeaseKeeper,
    settings: Settings,
    make_controller: Callable[[], Controller],
    stop: asyncio.Event,
    state: Leadership,
    where: str = "",
) -> int:
    """Act for each term ``keeper`` wins: a controller per term, cancelled when the term is
    lost; on ``stop`` the controller finishes (bounded) and the Lease is released."""
    log.info("waiting for leadership", lease=where)
    state.standby.set()
    keeper.start()
    try:
        while await keeper.term(stop):
            state.terms += 1
            log.info("became leader", identity=settings.identity, term=state.terms)
            controller = make_controller()
            state.controller = controller
            task = asyncio.create_task(controller.run(stop), name="controller")
            lost = asyncio.ensure_future(keeper.lost())
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait([task, lost, stopping], return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if stop.is_set():
                lost.cancel()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(task), settings.shutdown_grace + 5)
                return 0
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            state.controller = None
            if not lost.done():
                lost.cancel()
                exc = task.exception() if not task.cancelled() else None
                log.error("controller stopped unexpectedly", error=repr(exc))
                return 1
            log.error(
                "could not renew the Lease within the renew deadline; stopped acting, "
                "standing by for a new term",
                renew_deadline=settings.renew_deadline,
            )
        return 0
    except LeaseThreadFailed:
        log.error("cannot take or renew the Lease any more; exiting so that the Pod restarts")
        state.standby.clear()
        return 1
    finally:
        await keeper.close()
