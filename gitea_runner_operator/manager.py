"""The operator process: credentials, the /healthz and webhook servers, leadership and
shutdown, run from :class:`~gitea_runner_operator.settings.Settings` (which ``cli.py`` builds
from the flags)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TypeVar

import structlog
from kubernetes_asyncio import client, config

from gitea_runner_operator import __version__
from gitea_runner_operator.api.template_policy import TemplatePolicy
from gitea_runner_operator.health import HealthServer
from gitea_runner_operator.kube import watches
from gitea_runner_operator.kube.clients import api_client
from gitea_runner_operator.kube.lease_thread import LeaseTiming
from gitea_runner_operator.kube.reviews import ApiReviewer, MetricsAccess
from gitea_runner_operator.kube.secret_store import SecretStore
from gitea_runner_operator.kube.write_metrics import instrument_writes
from gitea_runner_operator.metrics import Metrics
from gitea_runner_operator.runtime import gc_tuning, gil, malloc_tuning
from gitea_runner_operator.runtime.controller import Controller
from gitea_runner_operator.runtime.leadership import (
    Leadership,
    LeaseElector,
    run_alone,
    run_with_leadership,
)
from gitea_runner_operator.runtime.lease_keeper import LeaseKeeper
from gitea_runner_operator.runtime.loopwatch import LoopWatch
from gitea_runner_operator.runtime.receiver_thread import ReceiverThread, on_loop
from gitea_runner_operator.runtime.webhook_port import OperatorPort
from gitea_runner_operator.settings import SA_NAMESPACE_FILE, Settings
from gitea_runner_operator.sharding.forwards import address
from gitea_runner_operator.sharding.leases.keeper import MemberKeeper
from gitea_runner_operator.sharding.leases.membership import MembershipLeases
from gitea_runner_operator.webhook import CachedSecretReader, WebhookServer
from gitea_runner_operator.webhook.forwarding import Forwarder
from gitea_runner_operator.webhook.secrets import (
    WebhookSecretError,
    parse_secret_location,
    read_secret,
    read_secret_file,
)

log = structlog.get_logger("gitea_runner_operator")


async def load_credentials(settings: Settings) -> str:
    """In-cluster when running in a Pod and no kubeconfig was named, else the kubeconfig."""
    if settings.kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()  # type: ignore[no-untyped-call]
        return "in-cluster"
    await config.load_kube_config(config_file=settings.kubeconfig, context=settings.context)
    return settings.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"


def startup_warnings(settings: Settings) -> list[str]:
    """Settings that leave a door open, said once at start so the platform team sees it."""
    warnings = []
    if not settings.allowed_gitea_urls:
        warnings.append(
            "--allowed-gitea-url is not set: a RunnerGroup may point the operator at any URL, "
            "and with it any labelled token whose Secret lacks the gitea.bpg.pw/gitea-url "
            "annotation (an admin token included); pin your Gitea instances with the flag"
        )
    if TemplatePolicy.parse(settings.template_policy).allow:
        warnings.append(
            f"--template-policy {settings.template_policy}: RunnerGroups' templates may ask "
            "for what it allows, in Pods the operator creates with its own identity"
        )
    return warnings


def lease_namespace(settings: Settings) -> str:
    if settings.lease_namespace:
        return settings.lease_namespace
    if env := os.environ.get("POD_NAMESPACE"):
        return env
    with contextlib.suppress(OSError):
        return SA_NAMESPACE_FILE.read_text().strip()
    return "default"


T = TypeVar("T")


def on_own_client(
    make: Callable[[client.ApiClient], T],
) -> Callable[[], AbstractAsyncContextManager[T]]:
    """What a Lease thread keeps, opened on that thread's own loop: a client and connection
    pool of its own, so neither queued writes nor a busy main loop delay a renewal."""
    lease_config = client.Configuration.get_default_copy()
    lease_config.connection_pool_maxsize = 2

    @asynccontextmanager
    async def opened() -> AsyncIterator[T]:
        async with api_client(lease_config) as api:
            yield make(api)

    return opened


def lease_elector(settings: Settings) -> Callable[[], AbstractAsyncContextManager[LeaseElector]]:
    """The leader Lease's elector, for its thread (runtime/lease_keeper.LeaseKeeper)."""
    return on_own_client(
        lambda api: LeaseElector(
            api,
            lease_namespace(settings),
            settings.lease_name,
            settings.identity,
            lease_duration=settings.lease_duration,
        )
    )


def member_leases(
    settings: Settings,
) -> Callable[[], AbstractAsyncContextManager[MembershipLeases]]:
    """This replica's membership Lease, for its thread (sharding/leases/keeper.MemberKeeper);
    the main loop's reads of everyone's go through a MembershipLeases of its own."""
    return on_own_client(
        lambda api: MembershipLeases(
            api,
            lease_namespace(settings),
            settings.lease_name,
            settings.identity,
            lease_duration=settings.lease_duration,
            webhook=webhook_address(settings),
        )
    )


def webhook_address(settings: Settings) -> str | None:
    """Where the other replicas reach this one's webhook receiver (``--sharding``): the Pod
    IP the chart passes in ``POD_IP`` and the webhook port. None without either: peers then
    leave this replica's groups to its polls (sharding/forwards.py)."""
    if not settings.sharding or not settings.webhook_port:
        return None
    return address(os.environ.get("POD_IP"), settings.webhook_port)


async def operator_webhook_secret(settings: Settings, secrets: SecretStore) -> bytes | None:
    """The operator-wide secret (system hooks), if one is configured. Read once: restart the
    operator after rotating it."""
    if settings.webhook_secret_file:
        return read_secret_file(settings.webhook_secret_file)
    if settings.webhook_secret:
        return await read_secret(secrets, parse_secret_location(settings.webhook_secret))
    return None


def webhook_server(
    settings: Settings,
    secrets: SecretStore,
    leadership: Leadership,
    secret: bytes | None,
    metrics: Metrics,
    main: asyncio.AbstractEventLoop,
) -> ReceiverThread:
    """The webhook receiver, on a thread of its own (runtime/receiver_thread.py), wired
    through its one port to whichever controller acts now on ``main``: a delivery wakes the
    matching groups' Gitea tasks for an immediate, coalesced refresh."""
    # --sharding: a delivery for groups another replica serves is handed to it, tagged
    # with the key the replicas share (a forward that verifies is never penalised).
    key = (
        read_secret_file(settings.forward_key_file, "--forward-key-file")
        if settings.sharding and settings.forward_key_file
        else None
    )
    forwarder = (
        Forwarder(settings.identity, on_outcome=metrics.webhook_forward, key=key)
        if settings.sharding
        else None
    )
    # The receiver's own cache of the hook secrets, read through the controller's loop.
    reader = CachedSecretReader(None, read=on_loop(main, functools.partial(read_secret, secrets)))
    server = WebhookServer(
        settings.webhook_host,
        settings.webhook_port,
        OperatorPort(leadership, reader, metrics, main),
        operator_secret=secret,
        forwarder=forwarder,
        forward_key=key,
    )
    return ReceiverThread(server)


async def run(settings: Settings) -> int:
    malloc_tuning.fix_mmap_threshold()  # big answers' buffers: runtime/malloc_tuning.py
    gc_tuning.tune_thresholds()  # the caches' heap: runtime/gc_tuning.py
    gil.tune_switch_interval()  # the loop beside computing threads: runtime/gil.py
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    try:
        source = await load_credentials(settings)
    except Exception as exc:  # the loaders raise anything from TypeError to ConfigException
        where = settings.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        log.error(
            "cannot load Kubernetes credentials; pass --kubeconfig or run in a Pod",
            kubeconfig=where,
            error=f"{type(exc).__name__}: {exc}",
        )
        return 2
    log.info(
        "starting",
        version=__version__,
        credentials=source,
        namespaces=list(settings.namespaces) or "all",
        leader_elect=settings.leader_elect,
        sharding=settings.sharding,
        identity=settings.identity,  # the holder named in its Leases
    )
    for warning in startup_warnings(settings):
        log.warning(warning)
    # Watches get their own connection pool, sized for them, so that the watch streams of
    # every namespace can never take every connection the writes and the Lease need, nor
    # wait for one another's.
    watch_config = client.Configuration.get_default_copy()
    watch_config.connection_pool_maxsize = (
        watches.streams(len(settings.namespaces), sharded=settings.sharding) + 4
    )
    # The membership Leases (--sharding) have a pool of their own too: a burst of writes
    # queued for connections must never make a replica miss its renew deadline. (The leader
    # Lease has a thread and a client of its own: lease_elector.)
    lease_config = client.Configuration.get_default_copy()
    lease_config.connection_pool_maxsize = 2
    # Reviews of scrapers' tokens (--metrics-auth) have a pool of their own: whoever sends
    # tokens must never take the connections the writes need.
    review_config = client.Configuration.get_default_copy()
    review_config.connection_pool_maxsize = 2
    metrics = Metrics()
    async with (
        LoopWatch(observe=metrics.loop_lag) as watch,
        api_client() as api,
        api_client(watch_config) as watch_api,
        api_client(lease_config) as lease_api,
        api_client(review_config) as review_api,
    ):
        instrument_writes(api, metrics.kube_write)
        leadership = Leadership()
        # One Secret reader for the process: the webhook receiver and every leadership term
        # share its cache, so a Secret costs one GET per TTL whoever asks.
        secrets = SecretStore(
            api, ttl=settings.secret_cache_ttl, role=settings.secrets_cluster_role
        )

        def make_controller() -> Controller:
            membership = keeper = None
            if settings.sharding:  # every replica acts, on its own share (sharding/leases/round.py)
                membership = MembershipLeases(
                    lease_api,
                    lease_namespace(settings),
                    settings.lease_name,
                    settings.identity,
                    lease_duration=settings.lease_duration,
                    webhook=webhook_address(settings),
                )
                # Our own Lease is renewed from a thread, as the leader Lease is.
                keeper = MemberKeeper(
                    member_leases(settings), LeaseTiming.of(settings), watch.heartbeat_age
                )
            controller = Controller(
                api,
                settings,
                watch_api,
                metrics,
                secret_store=secrets,
                membership=membership,
                member_keeper=keeper,
            )
            # Once its caches are full, the heap is moved out of the collector's way.
            gc_tuning.settle_after(
                controller.synced, controller.memory_limit, lambda: controller.woken_at
            )
            return controller

        def ready() -> bool:
            current = leadership.controller
            if current is not None and current.synced.is_set():
                return True
            return leadership.standby.is_set() and not stop.is_set()

        access = MetricsAccess(ApiReviewer(review_api)) if settings.metrics_auth else None
        receiver: ReceiverThread | None = None
        health = HealthServer(
            settings.health_host,
            settings.health_port,
            ready,
            metrics,
            render_every=settings.metrics_render_interval,
            metrics_access=access,
            live=lambda: receiver.problem() if receiver is not None else None,
        )
        try:
            await health.start()
        except OSError as exc:
            log.error(
                "cannot serve /healthz and /readyz; choose another --health-port",
                host=settings.health_host,
                port=settings.health_port,
                error=str(exc),
            )
            return 2
        if settings.webhook_port:
            try:
                secret = await operator_webhook_secret(settings, secrets)
                receiver = webhook_server(settings, secrets, leadership, secret, metrics, loop)
                await receiver.start()
            except (WebhookSecretError, OSError) as exc:
                log.error(
                    "cannot serve Gitea webhooks; fix the secret or choose another"
                    " --webhook-port (0 turns webhooks off)",
                    port=settings.webhook_port,
                    error=str(exc),
                )
                await health.stop()
                return 2
            log.info(
                "serving Gitea webhooks",
                path="/hooks/gitea",
                port=settings.webhook_port,
                operator_secret=secret is not None,
            )
        try:
            if not settings.leader_elect or settings.sharding:
                controller = make_controller()
                leadership.controller = controller
                return await run_alone(controller, stop)
            keeper = LeaseKeeper(
                lease_elector(settings), LeaseTiming.of(settings), watch.heartbeat_age
            )
            where = f"{lease_namespace(settings)}/{settings.lease_name}"
            return await run_with_leadership(
                keeper, settings, make_controller, stop, leadership, where
            )
        finally:
            if receiver is not None:
                await receiver.stop()
            await health.stop()
            log.info("stopped")
