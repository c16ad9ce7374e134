"""Operator-wide settings, gathered in one object so the wiring reads like a table."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# Where a Pod finds its own namespace.
SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
# Default name of the ClusterRole that lends the operator a namespace's Secrets.
SECRETS_ROLE = "gitea-runner-operator-secrets"
GITEA_STEP_DEADLINE = 60.0  # seconds; Settings.gitea_step_deadline


@dataclass(frozen=True, slots=True)
class Settings:
    namespaces: tuple[str, ...] = ()  # empty: every namespace
    kubeconfig: str | None = None
    context: str | None = None
    workers: int = 32
    health_host: str = "0.0.0.0"  # noqa: S104 - probes come from the kubelet, off-host
    health_port: int = 8081
    leader_elect: bool = True
    # Every replica acts, each on its capacity domains (sharding/leases/round.py); off: one leader.
    sharding: bool = False
    lease_name: str = "gitea-runner-operator"
    lease_namespace: str | None = None  # default: our own namespace, else "default"
    # Whole seconds: the Lease object stores leaseDurationSeconds as an integer.
    lease_duration: int = 15
    renew_deadline: int = 10
    retry_period: int = 2
    identity: str = field(default="")
    shutdown_grace: float = 20.0
    # Shortest gap between two observations of one group (wake-ups from webhooks or from
    # finished runners); shared per scope, so it bounds the load on Gitea per scope.
    min_refresh_interval: float = 0.5
    # How long a Job we created (or may have created) counts before the cache shows it;
    # client-go's ControllerExpectations use the same 5 minutes.
    expectation_timeout: float = 300.0
    job_ttl_seconds: int = 600  # ttlSecondsAfterFinished of runner Jobs
    # How long a runner may take to start before it stops covering a job in its family's
    # accounting and its group holds no share (reconcile/steps/claims.py).
    runner_start_bound: float = 120.0
    # Prefixes of the Gitea URLs groups may use; empty: any.
    allowed_gitea_urls: tuple[str, ...] = ()
    # The namespaces whose groups may use ``scope: global`` (--global-scope-namespace); None:
    # any. A global group joins every family of its Gitea into one capacity domain.
    global_scope_namespaces: frozenset[str] | None = None
    # Cap of the poll backoff while Gitea fails: bounds recovery time once it is back.
    gitea_backoff_max: float = 30.0
    # Longest a group's poll stretches to while its webhook deliveries arrive (api/cadence.py).
    max_webhook_poll_interval: float = 900.0
    # Seconds a rendered /metrics body is served before a scrape renders it again.
    metrics_render_interval: float = 5.0
    # /metrics only for bearer tokens allowed to get it (TokenReview, SubjectAccessReview).
    metrics_auth: bool = False
    # Deadline of one whole observation (Secrets + every Gitea request of a poll).
    observe_deadline: float = 60.0
    # Deadline of each Gitea step a poll takes after observing (reaping, re-runs after lost
    # runners, keeping the hook, enrolling Forgejo runners).
    gitea_step_deadline: float = GITEA_STEP_DEADLINE
    # How long a Secret read for a group is used before it is read again (--secret-cache-ttl).
    secret_cache_ttl: float = 60.0
    # Bytes of tenants' Gitea answers held at once, shared by namespace (kit/tenant_budget.py);
    # 0: from the container's memory limit.
    tenant_memory_budget: int = 0
    # Bytes a second of Gitea answers every tenant's polls may read, shared equally by the
    # namespaces that poll (kit/tenant_reads.py).
    tenant_read_rate: int = 4096 * 1024
    # Client-side rate limit on Kubernetes writes (client-go's QPS and burst).
    kube_write_qps: float = 100.0
    kube_write_burst: int = 200
    # What one namespace (a tenant) may have in flight at once: Kubernetes writes
    # (kube/ratelimit.py) and Gitea requests of its polls (forge/observe.py). Past it, its own
    # groups wait, not the others'.
    kube_writes_per_namespace: int = 8
    gitea_requests_per_namespace: int = 4
    # Gitea webhooks (POST /hooks/gitea); port 0 turns the receiver off.
    webhook_host: str = "0.0.0.0"  # noqa: S104 - Gitea delivers from off-host, via a Service
    webhook_port: int = 8082
    webhook_secret: str | None = None  # NAMESPACE/NAME[:KEY] of the operator-wide secret
    webhook_secret_file: str | None = None  # or a file holding it (a mounted Secret)
    # --sharding: the key the replicas share to tag the deliveries they forward to one
    # another (webhook/forwarding.py), a file (a mounted Secret); None: forwards untagged.
    forward_key_file: str | None = None
    # Where Gitea delivers to /hooks/gitea, for the hooks groups ask the operator to manage.
    webhook_url: str | None = None
    # What tenants' spec.template may ask for (api/template_policy.py): "restricted",
    # "permissive" or a comma list of allowances; ServiceAccounts allowed besides "default".
    template_policy: str = "restricted"
    template_service_accounts: tuple[str, ...] = ()
    # The operator's own namespace (POD_NAMESPACE or the in-cluster ServiceAccount's):
    # RunnerGroups there are refused. None when unknown (run from a workstation).
    own_namespace: str | None = None
    # The ClusterRole namespaces bind to lend the operator their Secrets: named in every
    # "may not read" message. The chart passes its own name (release-dependent).
    secrets_cluster_role: str = SECRETS_ROLE
