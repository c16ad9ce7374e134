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
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.runtime.controller import Controller
from gitea_runner_operator.settings import Settings

log = structlog.get_logger(__name__)


def _now_micro() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
        call_timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._leases: Any = client.CoordinationV1Api(api)
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
                "renewTime": _now_micro(),
                "acquireTime": (
                    _now_micro()
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
                "acquireTime": _now_micro(),
                "renewTime": _now_micro(),
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


class Leadership:
    """The controller of the current term, for readiness checks and tests."""

    def __init__(self) -> None:
        self.controller: Controller | None = None
        self.standby = asyncio.Event()
        self.terms = 0


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def run_with_leadership(
    elector: LeaseElector,
    settings: Settings,
    make_controller: Callable[[], Controller],
    stop: asyncio.Event,
    state: Leadership,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    log.info("waiting for leadership", lease=f"{elector.namespace}/{elector.name}")
    state.standby.set()
    while not stop.is_set():
        if not await elector.try_acquire_or_renew():
            await _wait(stop, settings.retry_period)
            continue
        state.terms += 1
        log.info("became leader", identity=settings.identity, term=state.terms)
        controller = make_controller()
        state.controller = controller
        task = asyncio.create_task(controller.run(stop), name="controller")
        last_renew = clock()
        lost = False
        while not stop.is_set() and not task.done():
            pause = asyncio.ensure_future(_wait(stop, settings.retry_period))
            await asyncio.wait([task, pause], return_when=asyncio.FIRST_COMPLETED)
            pause.cancel()
            if stop.is_set() or task.done():
                break
            budget = settings.renew_deadline - (clock() - last_renew)
            renewed = False
            if budget > 0:
                with contextlib.suppress(TimeoutError):
                    renewed = await asyncio.wait_for(elector.try_acquire_or_renew(), budget)
            if renewed:
                last_renew = clock()
            elif clock() - last_renew >= settings.renew_deadline:
                lost = True
                break
        if stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), settings.shutdown_grace + 5)
            await elector.release()
            return 0
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        state.controller = None
        if not lost:
            exc = task.exception() if not task.cancelled() else None
            log.error("controller stopped unexpectedly", error=repr(exc))
            return 1
        log.error(
            "could not renew the Lease within the renew deadline; stopped acting, "
            "standing by for a new term",
            renew_deadline=settings.renew_deadline,
        )
    return 0
