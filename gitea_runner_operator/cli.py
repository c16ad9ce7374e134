"""``gitea-runner-operator``: flags, logging, cluster credentials, leadership and shutdown."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

import structlog
from kubernetes_asyncio import client, config

from gitea_runner_operator import __version__, logsetup, uninstall, webhook, why
from gitea_runner_operator.api.template_policy import PolicyError, TemplatePolicy
from gitea_runner_operator.health import HealthServer
from gitea_runner_operator.kube.secret_store import SecretStore
from gitea_runner_operator.kube.write_metrics import instrument_writes
from gitea_runner_operator.metrics import Metrics
from gitea_runner_operator.runtime.controller import Controller
from gitea_runner_operator.runtime.leadership import Leadership, LeaseElector, run_with_leadership
from gitea_runner_operator.settings import Settings
from gitea_runner_operator.webhook import CachedSecretReader, Descriptors, WebhookServer
from gitea_runner_operator.webhook.secrets import (
    WebhookSecretError,
    parse_secret_location,
    read_secret,
    read_secret_file,
)

log = structlog.get_logger("gitea_runner_operator")

SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gitea-runner-operator",
        description="Start ephemeral Gitea Actions runners as Kubernetes Jobs for queued jobs.",
        epilog="Uninstalling: `gitea-runner-operator drain-groups --help` (the chart's "
        "pre-delete hook) and `gitea-runner-operator release-finalizers --help` (once the "
        "operator is gone).",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, else KUBECONFIG)")
    p.add_argument("--context", help="kubeconfig context (default: the current context)")
    p.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="watch only this namespace; repeat for several (default: all namespaces)",
    )
    p.add_argument("--workers", type=int, default=4, help="concurrent reconciles (default 4)")
    p.add_argument(
        "--health-port", type=int, default=8081, help="port of /healthz, /readyz, /metrics"
    )
    p.add_argument("--health-host", default="0.0.0.0", help="address of /healthz, /readyz")  # noqa: S104
    p.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="take a Lease before acting, so two replicas never both create runners",
    )
    p.add_argument("--leader-election-namespace", help="namespace of the Lease")
    p.add_argument(
        "--job-ttl-seconds",
        type=int,
        default=600,
        help="ttlSecondsAfterFinished of runner Jobs: how long finished Jobs stay for inspection",
    )
    p.add_argument(
        "--allowed-gitea-url",
        action="append",
        default=[],
        metavar="URL",
        help="a Gitea URL prefix RunnerGroups may use, e.g. https://gitea.example.com/; "
        "repeat for several (default: any URL)",
    )
    p.add_argument(
        "--gitea-backoff-max",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="longest wait between polls of a failing Gitea (default 30): bounds how long "
        "recovery takes once it is healthy again; Retry-After is honoured up to 300s",
    )
    p.add_argument(
        "--webhook-port",
        type=int,
        default=8082,
        help="port of POST /hooks/gitea (Gitea webhooks, plain HTTP); 0 turns it off",
    )
    p.add_argument("--webhook-host", default="0.0.0.0", help="address of /hooks/gitea")  # noqa: S104
    p.add_argument(
        "--webhook-url",
        metavar="URL",
        help="URL at which Gitea reaches POST /hooks/gitea (e.g. the webhook Service or an "
        "Ingress); needed by groups with spec.webhook.manageHook",
    )
    secret = p.add_mutually_exclusive_group()
    secret.add_argument(
        "--webhook-secret",
        metavar="NAMESPACE/NAME[:KEY]",
        help="Secret (label gitea.bpg.pw/credentials=true) holding the operator-wide webhook"
        " secret, for system hooks; KEY defaults to webhook-secret; read at start",
    )
    secret.add_argument(
        "--webhook-secret-file",
        metavar="PATH",
        help="file holding the operator-wide webhook secret (e.g. a mounted Secret); read at start",
    )
    p.add_argument(
        "--kube-write-qps",
        type=float,
        default=100.0,
        help="client-side limit of Kubernetes writes per second (default 100; a 429 from "
        "the API server slows all writes further)",
    )
    p.add_argument(
        "--kube-write-burst", type=int, default=200, help="burst of that limit (default 200)"
    )
    p.add_argument(
        "--template-policy",
        default="restricted",
        help="what RunnerGroups' spec.template may ask for: restricted (default), permissive, "
        "or a comma list of hostNamespaces, hostPath, privileged, nodeName, tolerateAll, "
        "serviceAccount, automountToken, unlabelledSecrets",
    )
    p.add_argument(
        "--template-service-account",
        action="append",
        default=[],
        metavar="NAME",
        help="a ServiceAccount runner Pods may use besides 'default' (repeatable)",
    )
    p.add_argument("--log-format", choices=["auto", "json", "console"], default="auto")
    p.add_argument("--log-level", default="info")
    return p


def settings_from_args(args: argparse.Namespace) -> Settings:
    if args.workers < 1:
        raise SystemExit("--workers must be at least 1")
    if args.job_ttl_seconds < 0:
        raise SystemExit("--job-ttl-seconds must not be negative")
    if args.kube_write_qps <= 0 or args.kube_write_burst < 1:
        raise SystemExit("--kube-write-qps must be > 0 and --kube-write-burst at least 1")
    if args.gitea_backoff_max < 1:
        raise SystemExit("--gitea-backoff-max must be at least 1 second")
    for url in args.allowed_gitea_url:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SystemExit(f"--allowed-gitea-url {url!r} is not an http(s) URL with a host")
    if not 0 <= args.webhook_port <= 65535:
        raise SystemExit("--webhook-port must be between 0 (off) and 65535")
    if args.webhook_url is not None:
        parts = urlsplit(args.webhook_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SystemExit(
                f"--webhook-url {args.webhook_url!r} is not an http(s) URL with a host"
            )
    try:
        TemplatePolicy.parse(args.template_policy)
    except PolicyError as exc:
        raise SystemExit(str(exc)) from None
    if args.webhook_secret is not None:
        try:
            parse_secret_location(args.webhook_secret)
        except WebhookSecretError as exc:
            raise SystemExit(str(exc)) from None
    return Settings(
        namespaces=tuple(dict.fromkeys(args.namespace)),
        kubeconfig=args.kubeconfig,
        context=args.context,
        workers=args.workers,
        health_host=args.health_host,
        health_port=args.health_port,
        leader_elect=args.leader_elect,
        lease_namespace=args.leader_election_namespace,
        identity=f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}",
        job_ttl_seconds=args.job_ttl_seconds,
        allowed_gitea_urls=tuple(args.allowed_gitea_url),
        gitea_backoff_max=args.gitea_backoff_max,
        kube_write_qps=args.kube_write_qps,
        kube_write_burst=args.kube_write_burst,
        webhook_host=args.webhook_host,
        webhook_port=args.webhook_port,
        webhook_secret=args.webhook_secret,
        webhook_secret_file=args.webhook_secret_file,
        webhook_url=args.webhook_url,
        template_policy=args.template_policy,
        template_service_accounts=tuple(args.template_service_account),
        own_namespace=own_namespace(),
    )


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


def own_namespace() -> str | None:
    """The namespace the operator runs in, when it runs in a Pod."""
    if env := os.environ.get("POD_NAMESPACE"):
        return env
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        with contextlib.suppress(OSError):
            return SA_NAMESPACE_FILE.read_text().strip() or None
    return None


def lease_namespace(settings: Settings) -> str:
    if settings.lease_namespace:
        return settings.lease_namespace
    if env := os.environ.get("POD_NAMESPACE"):
        return env
    with contextlib.suppress(OSError):
        return SA_NAMESPACE_FILE.read_text().strip()
    return "default"


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
) -> WebhookServer:
    """The webhook receiver, wired to whichever controller currently leads: a delivery wakes
    the matching groups' Gitea tasks for an immediate, coalesced refresh. A standby replica
    has no controller and answers 503 without acting; polling still finds the job."""
    descriptors = Descriptors()

    def groups() -> list[webhook.GroupDescriptor]:
        current = leadership.controller
        if current is None:
            return []
        cache = current.cache
        return descriptors.of(obj for key in cache.group_keys() if (obj := cache.group(key)))

    def wake(key: str) -> None:
        current = leadership.controller
        if current is not None:
            current.wake(key)

    return WebhookServer(
        settings.webhook_host,
        settings.webhook_port,
        groups=groups,
        wake=wake,
        operator_secret=secret,
        group_secret=CachedSecretReader(secrets),
        on_delivery=metrics.webhook_delivery,
        active=lambda: leadership.controller is not None,
    )


async def run(settings: Settings) -> int:
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
    )
    for warning in startup_warnings(settings):
        log.warning(warning)
    # Watches get their own connection pool, sized for them, so that three watch streams per
    # namespace can never take every connection the writes and the Lease need.
    watch_config = client.Configuration.get_default_copy()
    watch_config.connection_pool_maxsize = 3 * max(1, len(settings.namespaces)) + 4
    # The Lease has a pool of its own too: a burst of writes queued for connections must
    # never make the leader miss its renew deadline.
    lease_config = client.Configuration.get_default_copy()
    lease_config.connection_pool_maxsize = 2
    async with (
        client.ApiClient() as api,
        client.ApiClient(watch_config) as watch_api,
        client.ApiClient(lease_config) as lease_api,
    ):
        metrics = Metrics()
        instrument_writes(api, metrics.kube_write)
        leadership = Leadership()
        # One Secret reader for the process: the webhook receiver and every leadership term
        # share its cache, so a Secret costs one GET per TTL whoever asks.
        secrets = SecretStore(api, ttl=settings.secret_cache_ttl)

        def make_controller() -> Controller:
            return Controller(api, settings, watch_api, metrics, secret_store=secrets)

        def ready() -> bool:
            current = leadership.controller
            if current is not None and current.synced.is_set():
                return True
            return leadership.standby.is_set() and not stop.is_set()

        health = HealthServer(settings.health_host, settings.health_port, ready, metrics)
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
        receiver: WebhookServer | None = None
        if settings.webhook_port:
            try:
                secret = await operator_webhook_secret(settings, secrets)
                receiver = webhook_server(settings, secrets, leadership, secret, metrics)
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
            if not settings.leader_elect:
                controller = make_controller()
                leadership.controller = controller
                await controller.run(stop)
                return 0
            elector = LeaseElector(
                lease_api,
                lease_namespace(settings),
                settings.lease_name,
                settings.identity,
                lease_duration=settings.lease_duration,
            )
            return await run_with_leadership(elector, settings, make_controller, stop, leadership)
        finally:
            if receiver is not None:
                await receiver.stop()
            await health.stop()
            log.info("stopped")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["why"]:  # a subcommand for users, not the operator (why.py)
        return why.main(argv[1:])
    if argv and argv[0] in uninstall.COMMANDS:
        return uninstall.main(argv)
    args = build_parser().parse_args(argv)
    logsetup.configure(args.log_format, args.log_level)
    settings = settings_from_args(args)
    try:
        return asyncio.run(run(settings))
    except KeyboardInterrupt:
        return 130
