"""Wiring: informers feed the work queue, pollers feed it too, workers run the reconciler.

watch streams ──> ClusterCache ──┐
                                 ├──> WorkQueue ──> workers ──> Reconciler ──> Jobs, status
Gitea poll tasks (one per group) ┘        (snapshots)      reap orders ──> poll tasks

How a worker runs a pass, and retries it, is runtime/workers.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import time
from typing import Any

import structlog
from kubernetes_asyncio import client

from gitea_runner_operator.api.naming import GroupKey
from gitea_runner_operator.api.template_policy import TemplatePolicy
from gitea_runner_operator.forge.sessions import SessionPool
from gitea_runner_operator.kit.group_memory import GroupMemory, Table
from gitea_runner_operator.kit.priority import PICKUPS
from gitea_runner_operator.kit.tenant_budget import TenantBudget, default_budget, memory_limit
from gitea_runner_operator.kit.tenant_reads import ReadShares
from gitea_runner_operator.kube.cache import ClusterCache, group_key_of_owned, spec_changed
from gitea_runner_operator.kube.cache_objects import CacheObjects
from gitea_runner_operator.kube.cluster import Cluster
from gitea_runner_operator.kube.configmaps import ConfigReader
from gitea_runner_operator.kube.namespaces import NamespaceReader
from gitea_runner_operator.kube.ratelimit import TokenBucket
from gitea_runner_operator.kube.runner_credentials import RunnerCredentials
from gitea_runner_operator.kube.secret_store import SecretStore
from gitea_runner_operator.kube.secrets import Secrets
from gitea_runner_operator.metrics import Metrics
from gitea_runner_operator.objects.views import job_finished
from gitea_runner_operator.poll.enroll import Enroller
from gitea_runner_operator.poll.hooks import HookKeeper
from gitea_runner_operator.poll.observer import Observer
from gitea_runner_operator.poll.pacing import Pacing
from gitea_runner_operator.poll.pollers import Pollers
from gitea_runner_operator.poll.reaper import Reaper
from gitea_runner_operator.poll.rerun import LossFollowUp
from gitea_runner_operator.poll.steps import gitea_steps
from gitea_runner_operator.poll.triggers import owned_changed
from gitea_runner_operator.poll.trust import GiteaTrust
from gitea_runner_operator.reconcile.capacity.ledger import Ledger
from gitea_runner_operator.reconcile.expectations import Expectations
from gitea_runner_operator.reconcile.reconciler import Reconciler
from gitea_runner_operator.reconcile.scaling import ReapReason
from gitea_runner_operator.reconcile.status.parts import PendingLosses
from gitea_runner_operator.reconcile.steps.admission import Admissions
from gitea_runner_operator.reconcile.steps.jobcache import CacheServers
from gitea_runner_operator.reconcile.steps.status_later import LaterWrites
from gitea_runner_operator.runtime.shared_by_groups import SharedByGroups
from gitea_runner_operator.runtime.taken_polls import TakenPolls
from gitea_runner_operator.runtime.workers import ReconcileWorkers
from gitea_runner_operator.runtime.workqueue import WorkQueue
from gitea_runner_operator.settings import Settings
from gitea_runner_operator.sharding.leases.keeper import MemberKeeper
from gitea_runner_operator.sharding.leases.membership import MembershipLeases
from gitea_runner_operator.sharding.leases.share import Share

log = structlog.get_logger(__name__)


async def _until_stopped(stop: asyncio.Event, sharding: asyncio.Task[None]) -> None:
    """Wait for ``stop``; a sharding loop that ended before it (its Lease thread could not
    run, or a fault) ends the controller with its error: the replica would otherwise stay
    up and ready while holding no domain, and nothing would restart it."""
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([stopping, sharding], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if stop.is_set():
        return
    error = sharding.exception()
    log.error("the sharding loop ended while running: stopping", error=repr(error))
    raise error if error is not None else RuntimeError("the sharding loop ended")


class Controller:
    """``watch_api`` carries the long-lived watch streams, ``api`` every read and write, so
    that watches (three per namespace) can never take all connections from the writes."""

    def __init__(
        self,
        api: client.ApiClient,
        settings: Settings,
        watch_api: client.ApiClient | None = None,
        metrics: Metrics | None = None,
        secret_store: SecretStore | None = None,
        membership: MembershipLeases | None = None,
        member_keeper: MemberKeeper | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics if metrics is not None else Metrics()
        # --sharding: the informers keep only the Jobs and Pods of the groups served here.
        self.cache = ClusterCache(
            watch_api or api, settings.namespaces, shared=membership is not None
        )
        writes = TokenBucket(
            settings.kube_write_qps,
            settings.kube_write_burst,
            per_namespace=settings.kube_writes_per_namespace,
        )
        self.cluster = Cluster(api, settings.identity or "gitea-runner-operator", writes)
        # ``is None``: a store with nothing cached yet may be falsy, and the process's one
        # store must not be replaced by a second.
        store = (
            secret_store
            if secret_store is not None
            else SecretStore(api, ttl=settings.secret_cache_ttl, role=settings.secrets_cluster_role)
        )
        self.secrets = Secrets(store)
        self.sessions = SessionPool()
        self.queue: WorkQueue[str] = WorkQueue(metrics=self.metrics.workqueue)
        self.expectations = Expectations(settings.expectation_timeout)
        configs = ConfigReader(api, store, ttl=settings.secret_cache_ttl)
        self.template_policy = TemplatePolicy.parse(
            settings.template_policy, settings.template_service_accounts
        )
        # The container's memory limit, read once: the tenant budget's default and the
        # collector's settles (runtime/gc_tuning.py) are shares of it.
        self.memory_limit = memory_limit()
        # What tenants' Gitea answers may hold at once, shared by namespace.
        self.tenant_budget = TenantBudget(
            settings.tenant_memory_budget or default_budget(self.memory_limit)
        )
        log.info("tenant memory budget", mib=self.tenant_budget.total // (1024 * 1024))
        # What tenants' polls may read a second, shared by namespace: its CPU share.
        self.tenant_reads = ReadShares(settings.tenant_read_rate)
        # Each group's parsed spec and verdict, by uid and generation: the reconciler's, and
        # under --sharding the layout's (a layout change parses only the changed groups).
        self.admissions = Admissions(
            self.template_policy, settings.own_namespace, settings.global_scope_namespaces
        )
        # --sharding: this replica's share of the groups, and who serves the others.
        self.share: Share | None = None
        if membership is not None:
            sharding = self.metrics.sharding
            self.share = Share(membership, self.cache, self, settings, member_keeper, sharding,
                               admissions=self.admissions)  # fmt: skip
        self.observer = Observer(
            self.secrets,
            self.sessions,
            trust=GiteaTrust(configs),
            configs=configs,
            metrics=self.metrics,
            allowed_urls=settings.allowed_gitea_urls,
            deadline=settings.observe_deadline,
            template_policy=self.template_policy,
            tenant_budget=self.tenant_budget,
            # The ledger's (below): the queued jobs no group of a Gitea could run are counted,
            # not kept (forge/unserved.py).
            offered=lambda url: self.ledger.offered(url),
            requests_per_namespace=settings.gitea_requests_per_namespace,
            reads=self.tenant_reads,
        )
        self.reaper = Reaper(self.cluster, self.cache, on_reaped=self._on_reaped)
        # Loss records the pass writes with the group's status (reconcile/status/parts.py).
        self.loss_notes = PendingLosses()
        self.losses = LossFollowUp(
            self.cluster, self.cache, self.loss_notes, self.queue.add, self.metrics
        )
        self.hooks = HookKeeper(self.secrets, settings.webhook_url)
        self.enroller = Enroller(self.cluster, self.cache, RunnerCredentials(api, writes))
        # A group whose share of overlapping jobs grew must create: enqueue it.
        self.ledger = Ledger(notify=self.queue.add)
        self.pollers = Pollers(
            self.observer.observe,
            self.queue.add,
            gitea_steps(self.reaper, self.enroller, self.losses, self.hooks),
            pacing=Pacing(
                min_refresh=settings.min_refresh_interval,
                backoff_max=settings.gitea_backoff_max,
                step_deadline=settings.gitea_step_deadline,
                # How long an observation may take: past it (and a slack) the task hangs.
                observe_deadline=settings.observe_deadline,
                max_webhook_poll=settings.max_webhook_poll_interval,
            ),
            every_answer=self.ledger.must_weigh,
            observe_with=self.observer.observe_with,
            # A deleting group reuses a token it can no longer read only while its whole
            # namespace is being deleted (poll/last_good.py).
            namespace_deleting=NamespaceReader(api).deleting,
            # --sharding: a poll task writes only while its group's domain is held.
            right=self.share.serves if self.share is not None else None,
            left=self.share.left if self.share is not None else None,
            # The poll interval that follows the webhook evidence (api/cadence.py).
            on_cadence=lambda _key, before, after: self.metrics.cadence.changed(before, after),
            active=self._runners_active,
            jobs_changed_at=self.cache.changed_at,
            reads=self.tenant_reads,
        )
        self.metrics.cadence.bind(self.pollers.cadences)
        # A pass's status is patched by its group's writer, so no worker waits for a token.
        self.status_writes = LaterWrites(retry=self.queue.add_rate_limited)
        # One register of what the process keeps per group (kit/group_memory.py): the
        # reconciler registers what a pass keeps, the poll task first; the rest follows.
        self.memory = GroupMemory()
        self.reconciler = Reconciler(
            self.cache,
            self.cluster,
            self.pollers,
            self.expectations,
            job_ttl_seconds=settings.job_ttl_seconds,
            memory=self.memory,
            metrics=self.metrics,
            ledger=self.ledger,
            template_policy=self.template_policy,
            own_namespace=settings.own_namespace,
            start_bound=settings.runner_start_bound,
            cache_servers=CacheServers(
                CacheObjects(api, self.cluster.limiter), configs, self.secrets
            ),
            status_writes=self.status_writes,
            losses=self.loss_notes,
            placement=self.share.placement if self.share is not None else None,
            admissions=self.admissions,
            peer_offers=self.share.offers if self.share is not None else None,
            queue=self.queue,  # runner creates and marks: written after the pass, by group
        )
        # Kept until the group is deleted: a hand-over leaves these to the watch events
        # and to the poll task that stops with it.
        for holder in (self.cache, self.hooks, self.enroller, Table(self.losses.retiring)):
            self.memory.keep(holder, handed_over=False)
        self.shared = self.memory.keep(
            SharedByGroups(self.pollers, self.secrets, self.observer, self.sessions),
            handed_over=False,
        )
        for resource in ("runnergroups", "jobs", "pods"):  # watch_events_received
            received = functools.partial(self.cache.received, resource)
            self.metrics.sharding.bind_received(resource, received)
        self.cache.on_group_event(self._on_group)
        self.cache.on_owned_event(self._on_owned)
        for informer in self.cache.owned_informers("jobs"):
            informer.add_handler(self._on_job)
        self.synced = asyncio.Event()
        self.woken_at = -math.inf  # when a delivery last woke a group (monotonic)
        self.stopped = asyncio.Event()
        self.workers = ReconcileWorkers(self.queue, self.reconciler, self.metrics, self.share)
        serves = self.share.serves if self.share is not None else lambda _key: True
        self.taken_polls = TakenPolls(
            self.cache, self.admissions, self.reconciler, self.pollers, serves
        )

    def _on_group(self, key: str, kind: str, obj: dict[str, Any], before: Any) -> None:
        if self.share is not None:
            self.share.group_event(key, kind, obj, before)
        if spec_changed(kind, obj, before):
            self.queue.add(key)

    def take(self, keys: frozenset[str]) -> None:
        """The share took ``keys``: they are this replica's to reconcile now, and their
        deliveries are unproven here (their polls run at ``spec.pollInterval`` until one
        arrives: Pollers.handed_over). Their Gitea is asked at once, not once each group's
        first pass has come round the queue: after a SIGKILL their jobs have waited a Lease
        duration already (issue 46)."""
        for key in keys:
            self.pollers.handed_over(key)
            self.queue.add(key)
        self.taken_polls.start(keys)

    async def release(self, keys: frozenset[str]) -> None:
        """Another replica will serve these groups: finish their reconciles and runner writes
        under way, then forget what this replica kept to act on them (kit/group_memory.py)."""
        await self.workers.finish(keys)
        await self.reconciler.writes.finish(keys)
        for key in keys:
            await self.memory.handed_over(key)

    def _on_owned(self, key: str, kind: str, obj: dict[str, Any], before: Any) -> None:
        # A Job created and deleted before any reconcile saw it must not stay expected.
        if kind == "DELETED":
            self.expectations.observed(key, obj["metadata"]["name"])
        if owned_changed(kind, obj, before):  # not for a resourceVersion or heartbeat alone
            self.queue.add(key)
        poller = self.pollers.get(key) if kind == "ADDED" else None
        if poller is not None:  # a runner Job started: its group's poll must not stay long
            poller.shrink()

    def _runners_active(self, key: str) -> bool:
        """Whether the group has a runner Job alive or being created: its poll does not
        stretch then (api/cadence.py), and its runner list is asked on every poll."""
        if self.expectations.pending(key):
            return True
        return any(not job_finished(job) for job in self.cache.runner_jobs(key))

    def _on_job(self, kind: str, obj: dict[str, Any], before: dict[str, Any] | None) -> None:
        """``runner_jobs_failed_total``: a runner Job seen turning Failed (the Job controller
        gave up on its Pod: the runner never took its job, or crashed). Only a change this
        replica watched, of a group it serves: a Job listed already Failed (after a restart, a
        take, or a peer's Jobs read ahead under ``--sharding``) was counted by whoever saw it
        fail, and counting it again made every restart look like a burst of failures."""
        if kind == "DELETED" or before is None or not job_finished(obj, ("Failed",)):
            return
        if job_finished(before, ("Failed",)):
            return
        key = group_key_of_owned(obj)
        if key is not None and (self.share is None or self.share.serves(key)):
            namespace, name = GroupKey.parse(key)
            self.metrics.runner_job_failed(namespace, name)

    def _on_reaped(self, key: str, job_name: str, reason: ReapReason) -> None:
        namespace, name = GroupKey.parse(key)
        self.metrics.runner_reaped(namespace, name, reason.value)

    def wake(self, key: str) -> None:
        """Something outside (a webhook delivery) says the group's demand changed: have its
        Gitea task look now. A trigger, never a count: the answer comes from Gitea."""
        self.woken_at = time.monotonic()  # a pickup under way: runtime/gc_tuning waits it out
        # Others' bulk work makes way until its pass ends (kit/priority.py).
        PICKUPS.begin(key, GroupKey.parse(key)[0])
        poller = self.pollers.get(key)
        log.debug("group woken", group=key)  # the wake-up path's spans (webhook_latency.py)
        if poller is not None:
            poller.wake(paced=True)  # the receiver's WakeLimiter paces it already
        else:
            self.queue.add(key)

    def heard(self, key: str, job_id: int | None) -> None:
        """A verified webhook delivery for the group's scope (Pollers.heard)."""
        self.pollers.heard(key, job_id)

    def knows(self, key: str, job_id: int) -> bool:
        """Whether the group's latest Gitea answer lists job ``job_id`` as queued: a webhook
        delivery about it then brings nothing the group's reconcile has not seen."""
        poller = self.pollers.get(key)
        latest = poller.latest if poller is not None else None
        if latest is None or latest.observation is None:
            return False
        return any(job.id == job_id for job in latest.observation.queued)

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set (graceful) or the task is cancelled (leadership lost)."""
        informers = [
            asyncio.create_task(inf.run(), name=f"informer:{inf.name}")
            for inf in self.cache.informers
        ]
        workers: list[asyncio.Task[None]] = []
        self.metrics.set_leader(True)  # run() is only entered while acting (leader or alone)
        try:
            await self.cache.wait_synced()
            self.synced.set()
            log.info(
                "caches synced, starting workers",
                groups=len(self.cache.group_keys()),
                namespaces=list(self.settings.namespaces) or "all",
            )
            for key in self.cache.group_keys():
                self.queue.add(key)
            workers = self.workers.start(self.settings.workers)
            if self.share is not None:
                self.share.start()
                sharding = asyncio.create_task(self.share.run(stop), name="sharding")
                workers.append(sharding)
                await _until_stopped(stop, sharding)
            else:
                await stop.wait()
            log.info("stopping: finishing in-flight reconciles")
            self.queue.shut_down()
            await self.pollers.stop_all()
            _, pending = await asyncio.wait(workers, timeout=self.settings.shutdown_grace)
            if pending:
                log.warning("reconciles still running at the end of the grace period")
        finally:
            self.queue.shut_down()
            for task in [*workers, *informers, *self.taken_polls.cancel()]:
                task.cancel()
            for task in [*workers, *informers]:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await self.pollers.stop_all()
            if self.share is not None:  # after the sharding loop released the Lease
                await self.share.close()
            await self.status_writes.close()  # statuses handed over: written, or cancelled
            await self.reconciler.close()  # the background unmatched-jobs evaluations
            await self.reaper.close()
            with contextlib.suppress(Exception):  # best effort, like every Event
                await self.cluster.events.close()  # aggregated Events still pending
            await self.shared.close()  # the closes below do the rest
            await self.observer.close()
            await self.sessions.close()
            self.metrics.set_leader(False)
            self.stopped.set()
