"""Prometheus metrics: what the operator saw, decided and did, for dashboards and alerts.

Why it looks like this:
- One :class:`Metrics` object owns its own ``CollectorRegistry`` (never the process-global
  one), so every test, and every Controller in one process, starts from zero.
- Series are labelled by ``namespace`` and ``runnergroup`` plus small fixed label sets
  (state, reason, endpoint class, status code, verb, outcome, result), never by runner, Pod
  or job: the number of series grows with the number of RunnerGroups, not with CI traffic.
- Callers use typed methods (``group_observed``, ``runners_created`` ...) instead of touching
  prometheus objects, so the names and labels live in one module (``names.py``) that the
  docs' table and the alert rules are checked against.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import (
    CollectorRegistry,
    disable_created_metrics,
    generate_latest,
)

from gitea_runner_operator import __version__
from gitea_runner_operator.metrics.cadence import CadenceMetrics
from gitea_runner_operator.metrics.groups import GroupSeries
from gitea_runner_operator.metrics.names import (
    LAG_BUCKETS,
    REQUEST_BUCKETS,
    Series,
    endpoint_class,
    status_code_label,
)
from gitea_runner_operator.metrics.sharding import ShardingMetrics
from gitea_runner_operator.metrics.workqueue import WorkQueueMetrics


class Metrics(GroupSeries):
    """Every series the operator exports, on a registry of its own: the groups' series
    (inherited) and the process's own (Gitea, Kubernetes, reconcile, webhook, work queue,
    sharding)."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # ``*_created`` timestamp series double every counter and no rule here uses them.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        series = Series(r)

        info = series.gauge(
            "build_info", "Always 1; the version label names the running release.", ["version"]
        )
        info.labels(version=__version__).set(1)
        self._leader = series.gauge(
            "leader", "1 while this replica holds the Lease and acts, else 0."
        )

        super().__init__(r, clock)

        # -- Gitea ----------------------------------------------------------------------------
        self._gitea_requests = series.counter(
            "gitea_requests",
            "HTTP requests to Gitea by endpoint class and status code ('error': no answer).",
            ["endpoint", "code"],
        )
        self._gitea_latency = series.histogram(
            "gitea_request_duration_seconds",
            "Latency of one HTTP request to Gitea.",
            ["endpoint"],
            buckets=REQUEST_BUCKETS,
        )
        self._rate_waits = series.counter(
            "gitea_rate_limit_waits",
            "Times the operator waited because Gitea asked it to (429/503 Retry-After).",
        )
        self._rate_wait_seconds = series.counter(
            "gitea_rate_limit_wait_seconds", "Seconds spent waiting on Retry-After."
        )

        # -- Kubernetes, reconcile, webhook ---------------------------------------------------
        self._kube_writes = series.counter(
            "kube_writes",
            "Kubernetes API writes by verb, resource and outcome.",
            ["verb", "resource", "outcome"],
        )
        self._reconcile = series.histogram(
            "reconcile_duration_seconds",
            "Duration of one reconcile pass.",
            ["result"],
            buckets=REQUEST_BUCKETS,
        )
        self._runner_writes = series.histogram(
            "runner_writes_duration_seconds",
            "Runner Job creates or marks a pass handed to its group's writer: from the"
            " hand-over to the last answer.",
            ["kind"],
            buckets=REQUEST_BUCKETS,
        )
        self._reconcile_errors = series.counter(
            "reconcile_errors", "Reconcile passes that raised (and were retried)."
        )
        self._webhook = series.counter(
            "webhook_deliveries", "Gitea webhook deliveries received, by outcome.", ["outcome"]
        )
        self._forwards = series.counter(
            "webhook_forwards",
            "Webhook deliveries handed to the replica serving their groups (--sharding), by"
            " outcome.",
            ["outcome"],
        )
        self.workqueue = WorkQueueMetrics(r)
        self.sharding = ShardingMetrics(r)
        self.cadence = CadenceMetrics(r)
        self._loop_lag = series.histogram(
            "event_loop_lag_seconds",
            "How late the event loop woke a task that sleeps a fixed interval (every 0.5 s): "
            "the loop was busy with something else for that long.",
            buckets=LAG_BUCKETS,
        )

    # -- exposition ---------------------------------------------------------------------------

    def render(self) -> bytes:
        """The registry in Prometheus text format (what ``GET /metrics`` returns)."""
        return generate_latest(self.registry)

    # -- Gitea --------------------------------------------------------------------------------

    def gitea_request(self, endpoint: str, code: str, seconds: float) -> None:
        self._gitea_requests.labels(endpoint, code).inc()
        self._gitea_latency.labels(endpoint).observe(max(0.0, seconds))

    def observe_gitea(self, method: str, path: str, status: int | None, seconds: float) -> None:
        """The hook of ``GiteaClient(on_request=...)``: classifies the path first."""
        self.gitea_request(endpoint_class(method, path), status_code_label(status), seconds)

    def gitea_rate_limit_wait(self, seconds: float) -> None:
        self._rate_waits.inc()
        self._rate_wait_seconds.inc(max(0.0, seconds))

    # -- Kubernetes, reconcile, webhook, leadership ------------------------------------------

    def kube_write(self, verb: str, outcome: str, resource: str = "other") -> None:
        self._kube_writes.labels(verb, resource, outcome).inc()

    def reconcile_done(self, seconds: float, error: bool) -> None:
        self._reconcile.labels("error" if error else "success").observe(max(0.0, seconds))
        if error:
            self._reconcile_errors.inc()

    def runner_writes_done(self, kind: str, seconds: float) -> None:
        """``kind``: ``create`` or ``mark`` (reconcile/steps/runner_writes.py)."""
        self._runner_writes.labels(kind).observe(max(0.0, seconds))

    def webhook_delivery(self, outcome: str) -> None:
        self._webhook.labels(outcome).inc()

    def webhook_forward(self, outcome: str) -> None:
        self._forwards.labels(outcome).inc()

    def loop_lag(self, seconds: float) -> None:
        self._loop_lag.observe(max(0.0, seconds))

    def set_leader(self, leader: bool) -> None:
        self._leader.set(1 if leader else 0)
