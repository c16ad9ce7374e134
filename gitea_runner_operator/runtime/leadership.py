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

And one of this operator's own: the Lease does not share the event loop's fate; it is kept
from a thread of its own (runtime/lease_keeper.py). The Lease calls themselves are
kube/leases.py's, shared with the membership Leases of ``--sharding``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import structlog
from kubernetes_asyncio import client

from gitea_runner_operator.kit.clock import utc_now_micro
from gitea_runner_operator.kube.http import LEASE_TIMEOUT
from gitea_runner_operator.kube.lease_thread import LeaseThreadFailed
from gitea_runner_operator.kube.leases import LeaseCalls
from gitea_runner_operator.objects.leases import Sightings, lease_body
from gitea_runner_operator.runtime.controller import Controller
from gitea_runner_operator.runtime.lease_keeper import LeaseKeeper
from gitea_runner_operator.settings import Settings

log = structlog.get_logger(__name__)


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
        self._calls = LeaseCalls.on(api, namespace, call_timeout, leases)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self._duration = lease_duration
        self._clock = clock
        self._sightings = Sightings(clock)

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; True when we hold the lease afterwards. Never raises for API or
        network trouble (that is simply "not renewed")."""
        try:
            return await self._attempt()
        except Exception as exc:  # ApiException, OSError, timeouts, aiohttp's errors
            log.warning("lease call failed", lease=self.name, error=type(exc).__name__)
            return False

    async def _attempt(self) -> bool:
        asked = self._clock()
        lease = await self._calls.read(self.name)
        if lease is None:
            now = utc_now_micro()
            return await self._write(None, acquired=now, transitions=0)
        lapsed = self._sightings.lapsed(lease, lease.duration or self._duration, asked)
        if lease.holder and lease.holder != self.identity and not lapsed:
            return False  # someone else holds it and renewed within its duration
        ours = lease.holder == self.identity
        return await self._write(
            lease.version,
            acquired=lease.acquired if ours and lease.acquired else utc_now_micro(),
            transitions=lease.transitions + (0 if ours else 1),
        )

    async def _write(self, version: str | None, *, acquired: str, transitions: int) -> bool:
        """With the resourceVersion read, the write is a compare-and-swap that fails (409:
        False) if anyone wrote in between."""
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self._duration,
            "renewTime": utc_now_micro(),
            "acquireTime": acquired,
            "leaseTransitions": transitions,
        }
        body = lease_body(self.namespace, self.name, spec, version=version)
        return await self._calls.write(body) is not None

    async def release(self) -> None:
        """Give the Lease up if we hold it, so the next candidate need not wait for it to
        expire. Uses the resourceVersion it read: never clears a lease someone else took."""
        try:
            lease = await self._calls.read(self.name)
            if lease is None or lease.holder != self.identity:
                return
            spec = {
                "holderIdentity": None,
                "leaseDurationSeconds": 1,
                "leaseTransitions": lease.transitions,
            }
            body = lease_body(self.namespace, self.name, spec, version=lease.version)
            if await self._calls.write(body) is None:
                return  # someone wrote it in between: not ours to clear any more
            log.info("released leadership")
        except Exception as exc:
            log.warning("could not release the Lease", error=type(exc).__name__)


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


async def run_alone(controller: Controller, stop: asyncio.Event) -> int:
    """Act without a leader Lease: the only replica, or every replica of ``--sharding``.
    A membership Lease thread that cannot run ends the process (1), as the leader Lease's
    does in :func:`run_with_leadership`: the replica could never hold a domain again, and
    would otherwise sit alive and ready serving nothing while Kubernetes saw no reason to
    restart it."""
    try:
        await controller.run(stop)
    except LeaseThreadFailed:
        log.error("cannot renew the membership Lease any more; exiting so that the Pod restarts")
        return 1
    return 0
