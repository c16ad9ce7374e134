"""Lease-based leader election around the controller.

Two replicas (or a forgotten local run beside the Deployment) must never both create runners:
only the holder of the Lease runs the controller. On SIGTERM the holder releases the Lease
(like controller-runtime's ReleaseOnCancel) so a successor starts at once instead of waiting
out the lease; on a lost lease the process exits non-zero, and a fresh start re-lists
everything rather than trusting state gathered while it was not the leader.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

from gitea_runner_operator.runtime.controller import Controller
from gitea_runner_operator.settings import Settings

log = structlog.get_logger(__name__)


async def run_with_leadership(
    api: client.ApiClient,
    settings: Settings,
    namespace: str,
    controller: Controller,
    stop: asyncio.Event,
    standby: asyncio.Event,
) -> int:
    lost = asyncio.Event()

    async def on_lost() -> None:
        if not stop.is_set():
            log.error("lost leadership; exiting so that a fresh start re-lists everything")
        lost.set()

    async def lead() -> None:
        log.info("became leader", identity=settings.identity)
        await controller.run(stop)

    lock = LeaseLock(settings.lease_name, namespace, settings.identity, api)
    election = leaderelection.LeaderElection(
        electionconfig.Config(
            lock,
            lease_duration=settings.lease_duration,
            renew_deadline=settings.renew_deadline,
            retry_period=settings.retry_period,
            onstarted_leading=lead,
            onstopped_leading=on_lost,
        )
    )
    log.info("waiting for leadership", lease=f"{namespace}/{settings.lease_name}")
    standby.set()
    election_task = asyncio.create_task(election.run(), name="leader-election")
    stop_task = asyncio.create_task(stop.wait())
    lost_task = asyncio.create_task(lost.wait())
    await asyncio.wait([stop_task, lost_task, election_task], return_when=asyncio.FIRST_COMPLETED)
    if election_task.done() and not election_task.cancelled() and election_task.exception():
        exc = election_task.exception()
        log.error("leader election failed", error=f"{type(exc).__name__}: {exc}")
    if stop.is_set() and controller.synced.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(controller.stopped.wait(), settings.shutdown_grace + 5)
    for task in (election_task, stop_task, lost_task):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    if stop.is_set():
        await release(api, namespace, settings.lease_name, settings.identity)
        return 0
    return 1


async def release(api: client.ApiClient, namespace: str, name: str, identity: str) -> None:
    """Give the Lease up if we hold it, so the next candidate need not wait for it to expire."""
    leases: Any = client.CoordinationV1Api(api)
    try:
        lease = await leases.read_namespaced_lease(name, namespace)
        if lease.spec is None or lease.spec.holder_identity != identity:
            return
        await leases.patch_namespaced_lease(
            name,
            namespace,
            {"spec": {"holderIdentity": None}},
            _content_type="application/merge-patch+json",
        )
        log.info("released leadership")
    except ApiException as exc:
        log.warning("could not release the Lease", status=exc.status)
