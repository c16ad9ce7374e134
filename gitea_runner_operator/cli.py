"""``gitea-runner-operator``: flags -> :class:`~gitea_runner_operator.settings.Settings`, logging,
and the subcommands; :mod:`.manager` runs the operator."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import sys
import uuid
from collections.abc import Sequence
from urllib.parse import urlsplit

import structlog

from gitea_runner_operator.kit.frugal import bound_process_memory

# The process entry point: memory bounds first, before the imports below load the
# Kubernetes client (E402 for them is allowed in this file alone, pyproject.toml).
bound_process_memory()

from gitea_runner_operator import __version__, logsetup, manager
from gitea_runner_operator.api.template_policy import PolicyError, TemplatePolicy
from gitea_runner_operator.commands import uninstall, why
from gitea_runner_operator.settings import SA_NAMESPACE_FILE, SECRETS_ROLE, Settings
from gitea_runner_operator.webhook.secrets import (
    WebhookSecretError,
    parse_secret_location,
)

log = structlog.get_logger("gitea_runner_operator")

# Settings whose flag has the same name (``--health-port`` -> ``health_port``).
SAME_NAMES = (
    "kubeconfig", "context", "workers", "health_host", "health_port", "leader_elect", "sharding",
    "job_ttl_seconds", "gitea_backoff_max", "kube_write_qps", "kube_write_burst",
    "webhook_host", "webhook_port", "webhook_secret", "webhook_secret_file", "webhook_url",
    "template_policy", "secrets_cluster_role", "metrics_render_interval",
    "metrics_auth", "secret_cache_ttl", "forward_key_file", "max_webhook_poll_interval",
    "kube_writes_per_namespace", "gitea_requests_per_namespace",
)  # fmt: skip


# The subcommands beside running the operator, each with its line in --help. They are
# dispatched by their first word (main), not by argparse, so each keeps its own parser.
SUBCOMMANDS = {"why": why.SUMMARY, **uninstall.COMMANDS}


def _commands_help() -> str:
    width = max(map(len, SUBCOMMANDS))
    rows = [f"  {name.ljust(width)}  {line}" for name, line in SUBCOMMANDS.items()]
    return "\n".join(
        [
            "commands (`gitea-runner-operator COMMAND --help` for a command's flags):",
            *rows,
            "",
            "Without a command it runs the operator with the flags above.",
        ]
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gitea-runner-operator",
        usage="%(prog)s [COMMAND] [flags]",
        description="Start ephemeral Gitea Actions runners as Kubernetes Jobs for queued jobs.",
        epilog=_commands_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    p.add_argument("--workers", type=int, default=32, help="concurrent reconciles (default 32)")
    p.add_argument(
        "--health-port", type=int, default=8081, help="port of /healthz, /readyz, /metrics"
    )
    p.add_argument("--health-host", default="0.0.0.0", help="address of /healthz, /readyz")  # noqa: S104
    p.add_argument(
        "--metrics-render-interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="a /metrics body is rendered at most this often, off the event loop; scrapes "
        "in between get the last one (default 5)",
    )
    p.add_argument(
        "--tenant-memory-budget",
        type=int,
        default=0,
        metavar="MIB",
        help="MiB of tenants' Gitea answers held at once (being read, parsed and kept), "
        "shared fairly by namespace; 0: 40%% of the container's memory limit, or 256 "
        "without one (default 0)",
    )
    p.add_argument(
        "--tenant-read-rate",
        type=int,
        default=4096,
        metavar="KIB",
        help="KiB a second of Gitea answers all tenants' polls may read, shared equally by "
        "the namespaces that poll; a namespace past its share has its polls nobody woke "
        "wait (default 4096)",
    )
    p.add_argument(
        "--metrics-auth",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="serve /metrics only to bearer tokens allowed to get the non-resource URL "
        "/metrics (TokenReview and SubjectAccessReview; needs create on both)",
    )
    p.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="take a Lease before acting, so two replicas never both create runners",
    )
    p.add_argument("--leader-election-namespace", help="namespace of the Lease")
    p.add_argument(
        "--sharding",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="every replica acts, each on its share of the groups by capacity domain"
        " (membership Leases in the leader election namespace; experimental)",
    )
    p.add_argument(
        "--forward-key-file",
        metavar="PATH",
        help="--sharding: a file holding the key the replicas share to authenticate the "
        "webhook deliveries they forward to one another (the chart mounts one); read at start",
    )
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
        "--max-webhook-poll-interval",
        type=float,
        default=900.0,
        metavar="SECONDS",
        help="longest a group's poll may stretch to (spec.webhook.pollInterval) while its "
        "webhook deliveries are known to arrive (default 900); a job whose delivery is lost "
        "waits at most this long; the group's spec.pollInterval if shorter",
    )
    p.add_argument(
        "--secret-cache-ttl",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long a Secret read for a group is used before it is read again (default "
        "60): a rotated token is picked up within it, at once when Gitea refuses the old one",
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
        "--kube-writes-per-namespace",
        type=int,
        default=8,
        metavar="N",
        help="Kubernetes writes of one namespace in flight at once: past it, that namespace's "
        "groups wait, not the others' (default 8)",
    )
    p.add_argument(
        "--gitea-requests-per-namespace",
        type=int,
        default=4,
        metavar="N",
        help="Gitea requests of one namespace's polls in flight at once (sent, answered and "
        "parsed): past it, that namespace's groups wait, not the others' (default 4)",
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
    p.add_argument(
        "--global-scope-namespace",
        action="append",
        default=[],
        metavar="NAMESPACE",
        help="a namespace whose RunnerGroups may use scope: global (repeatable; unset: any); "
        "a global group elsewhere is refused (GlobalScopeNotAllowed)",
    )
    p.add_argument(
        "--secrets-cluster-role",
        default=SECRETS_ROLE,
        metavar="NAME",
        help="the ClusterRole namespaces bind to lend the operator their Secrets, named in "
        "the messages about a Secret it may not read (the chart passes its own; default "
        "%(default)s)",
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
    if not 1 <= args.kube_writes_per_namespace <= 1024:
        raise SystemExit("--kube-writes-per-namespace must be at least 1 and at most 1024")
    if not 1 <= args.gitea_requests_per_namespace <= 1024:
        raise SystemExit("--gitea-requests-per-namespace must be at least 1 and at most 1024")
    if args.gitea_backoff_max < 1:
        raise SystemExit("--gitea-backoff-max must be at least 1 second")
    if not 5 <= args.max_webhook_poll_interval <= 3600:
        raise SystemExit("--max-webhook-poll-interval must be at least 5 and at most 3600 seconds")
    if not 1 <= args.secret_cache_ttl <= 3600:
        raise SystemExit("--secret-cache-ttl must be at least 1 and at most 3600 seconds")
    if args.tenant_memory_budget < 0:
        raise SystemExit("--tenant-memory-budget must not be negative (0: from the memory limit)")
    if not 16 <= args.tenant_read_rate <= 1024 * 1024:
        raise SystemExit("--tenant-read-rate must be at least 16 and at most 1048576 KiB/s")
    if not 0 < args.metrics_render_interval <= 60:
        raise SystemExit("--metrics-render-interval must be more than 0 and at most 60 seconds")
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
    # Flags named like their setting are copied as they are; the others are spelled out.
    same = {name: getattr(args, name) for name in SAME_NAMES}
    return Settings(
        **same,
        namespaces=tuple(dict.fromkeys(args.namespace)),
        lease_namespace=args.leader_election_namespace,
        identity=f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}",
        allowed_gitea_urls=tuple(args.allowed_gitea_url),
        template_service_accounts=tuple(args.template_service_account),
        global_scope_namespaces=frozenset(args.global_scope_namespace)
        if args.global_scope_namespace
        else None,
        own_namespace=own_namespace(),
        tenant_memory_budget=args.tenant_memory_budget * 1024 * 1024,
        tenant_read_rate=args.tenant_read_rate * 1024,
    )


def own_namespace() -> str | None:
    """The namespace the operator runs in, when it runs in a Pod."""
    if env := os.environ.get("POD_NAMESPACE"):
        return env
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        with contextlib.suppress(OSError):
            return SA_NAMESPACE_FILE.read_text().strip() or None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["why"]:  # a subcommand for users, not the operator (commands/why.py)
        return why.main(argv[1:])
    if argv and argv[0] in uninstall.COMMANDS:
        return uninstall.main(argv)
    args = build_parser().parse_args(argv)
    logsetup.configure(args.log_format, args.log_level)
    settings = settings_from_args(args)
    try:
        return asyncio.run(manager.run(settings))
    except KeyboardInterrupt:
        return 130
