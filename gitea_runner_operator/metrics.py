"""Prometheus metrics: what the operator saw, decided and did, for dashboards and alerts.

Why it looks like this:
- One :class:`Metrics` object owns its own ``CollectorRegistry`` (never the process-global
  one), so every test, and every Controller in one process, starts from zero.
- Series are labelled by ``namespace`` and ``runnergroup`` plus small fixed label sets
  (state, reason, endpoint class, status code, verb, outcome, result), never by runner, Pod
  or job: the number of series grows with the number of RunnerGroups, not with CI traffic.
- Callers use typed methods (``group_observed``, ``runners_created`` ...) instead of touching
  prometheus objects, so the names and labels live in one file that the docs' table and
  the alert rules are checked against.
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from gitea_runner_operator import __version__
from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.timings import execution_time, startup_latency

PREFIX: Final = "gitea_runner_operator_"
CONTENT_TYPE: Final = CONTENT_TYPE_PLAIN_0_0_4
GROUP_LABELS: Final = ("namespace", "runnergroup")
RUNNER_STATES: Final = ("starting", "idle", "busy")

# Seconds. Start-up latency spans a poll interval plus a Pod start (image pull): 1 s .. 30 min.
LATENCY_BUCKETS: Final = (1, 2.5, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1800)
# Job execution: seconds to hours.
DURATION_BUCKETS: Final = (5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400)
# HTTP requests and reconcile passes: milliseconds to the 30 s client timeout.
REQUEST_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
QUEUE_BUCKETS: Final = (0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

# Job ids already observed, per group and kind. The lists fed in are one page each (the
# running jobs, the newest finished), so an id not listed for SEEN_JOBS_TTL has left them
# for good; the size cap bounds a group whose pages churn faster than that.
SEEN_JOBS_PER_GROUP: Final = 500
# Distinct values of a ``reason`` label per metric (reaped, rerun); the rest are "other".
MAX_REASONS: Final = 24
SEEN_JOBS_TTL: Final = 1800.0

ENDPOINT_CLASSES: Final = ("jobs", "runners", "runner_delete", "scope", "other")
KUBE_OUTCOMES: Final = {
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    422: "invalid",
}

_RUNNER_ITEM = re.compile(r"/actions/runners/\d+$")


def endpoint_class(method: str, path: str) -> str:
    """The Gitea endpoint class of a request, one of :data:`ENDPOINT_CLASSES`. Paths carry
    organisation, repository and runner ids; the class keeps the label set fixed."""
    path = path.split("?", 1)[0].rstrip("/")
    if method.upper() == "DELETE" and _RUNNER_ITEM.search(path):
        return "runner_delete"
    if path.endswith("/actions/jobs"):
        return "jobs"
    if path.endswith("/actions/runners"):
        return "runners"
    if re.fullmatch(r"/api/v1/(user|orgs/[^/]+|repos/[^/]+/[^/]+)", path):
        return "scope"
    return "other"


def status_code_label(status: int | None) -> str:
    """``"200"``, ``"404"`` ...; ``"error"`` when no HTTP answer came (connection, timeout)."""
    return "error" if status is None else str(status)


def kube_outcome(status: int | None) -> str:
    """Outcome of a Kubernetes API write, by HTTP status; a fixed label set."""
    if status is None:
        return "error"
    if 200 <= status < 300:
        return "success"
    if status in KUBE_OUTCOMES:
        return KUBE_OUTCOMES[status]
    return "client_error" if 400 <= status < 500 else "server_error"


class WorkQueueMetrics:
    """The hook :class:`~gitea_runner_operator.runtime.workqueue.WorkQueue` calls. Depth and
    longest-running are read from the queue at scrape time (``bind``), so they are never stale."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._depth = Gauge(
            PREFIX + "workqueue_depth", "RunnerGroup keys waiting in the work queue.",
            registry=registry,
        )  # fmt: skip
        self._longest = Gauge(
            PREFIX + "workqueue_longest_running_processor_seconds",
            "How long the longest reconcile in progress has been running.",
            registry=registry,
        )
        self._adds = Counter(
            PREFIX + "workqueue_adds", "Keys queued (after de-duplication).", registry=registry
        )
        self._retries = Counter(
            PREFIX + "workqueue_retries", "Keys re-queued with back-off after a failed reconcile.",
            registry=registry,
        )  # fmt: skip
        self._queued = Histogram(
            PREFIX + "workqueue_queue_duration_seconds",
            "How long a key waited in the queue before a worker took it.",
            buckets=QUEUE_BUCKETS,
            registry=registry,
        )
        self._work = Histogram(
            PREFIX + "workqueue_work_duration_seconds",
            "How long a worker held a key (one reconcile pass).",
            buckets=QUEUE_BUCKETS,
            registry=registry,
        )

    def bind(self, depth: Callable[[], int], longest_running: Callable[[], float]) -> None:
        self._depth.set_function(lambda: float(depth()))
        self._longest.set_function(longest_running)

    def added(self) -> None:
        self._adds.inc()

    def retried(self) -> None:
        self._retries.inc()

    def waited(self, seconds: float) -> None:
        self._queued.observe(max(0.0, seconds))

    def worked(self, seconds: float) -> None:
        self._work.observe(max(0.0, seconds))


class Metrics:
    """Every series the operator exports, on a registry of its own."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        # ``*_created`` timestamp series double every counter and no rule here uses them.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        g = GROUP_LABELS

        info = Gauge(
            PREFIX + "build_info", "Always 1; the version label names the running release.",
            ["version"], registry=r,
        )  # fmt: skip
        info.labels(version=__version__).set(1)
        self._leader = Gauge(
            PREFIX + "leader", "1 while this replica holds the Lease and acts, else 0.",
            registry=r,
        )  # fmt: skip

        # -- per RunnerGroup ------------------------------------------------------------------
        self._queued = Gauge(
            PREFIX + "queued_jobs",
            "Queued Gitea jobs the group's labels can run, at the last poll (demand).",
            g, registry=r,
        )  # fmt: skip
        self._runners = Gauge(
            PREFIX + "runners", "Alive runner Jobs of the group by state.",
            [*g, "state"], registry=r,
        )  # fmt: skip
        self._desired = Gauge(
            PREFIX + "desired_runners",
            "Runner Jobs the group wants alive after this pass (alive + to create - to reap).",
            g, registry=r,
        )  # fmt: skip
        self._max = Gauge(
            PREFIX + "max_active_runners", "The group's spec.maxActiveRunners.", g, registry=r
        )
        self._ready = Gauge(
            PREFIX + "ready", "1 when the group's Ready condition is True, else 0.", g, registry=r
        )
        self._failed_now = Gauge(
            PREFIX + "failed_runner_jobs",
            "Failed runner Jobs of the group that exist now (kept for ttlSecondsAfterFinished).",
            g, registry=r,
        )  # fmt: skip
        self._created = Counter(PREFIX + "runners_created", "Runner Jobs created.", g, registry=r)
        self._reaped = Counter(
            PREFIX + "runners_reaped", "Runner Jobs deleted by the operator, by reason.",
            [*g, "reason"], registry=r,
        )  # fmt: skip
        self._reruns = Counter(
            PREFIX + "jobs_rerun",
            "Gitea jobs re-run because their runner was lost, by cause (docs/lost-runners.md).",
            [*g, "reason"], registry=r,
        )  # fmt: skip
        self._failed = Counter(
            PREFIX + "runner_jobs_failed", "Runner Jobs seen Failed for the first time.",
            g, registry=r,
        )  # fmt: skip
        self._startup = Histogram(
            PREFIX + "job_startup_latency_seconds",
            "Gitea job created -> taken by one of the group's runners (Gitea's timestamps).",
            g, buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        # Per namespace, not per group: how long a tenant's jobs run is the tenant's figure
        # (capacity planning), and 14 series per group were a third of a group's series.
        self._duration = Histogram(
            PREFIX + "job_duration_seconds",
            "Gitea job started -> finished on a runner of a group in this namespace "
            "(Gitea's timestamps).",
            ["namespace"], buckets=DURATION_BUCKETS, registry=r,
        )  # fmt: skip
        self._group_series: tuple[Gauge | Counter | Histogram, ...] = (
            self._queued, self._desired, self._max, self._ready, self._failed_now,
            self._created, self._failed, self._startup,
        )  # fmt: skip
        # Distinct ``reason`` values seen per metric; past MAX_REASONS they count as "other".
        self._reasons: dict[str, set[str]] = {}
        # The groups that fed a namespace's duration histogram: it goes with the last of them.
        self._duration_groups: dict[str, set[str]] = {}

        # -- Gitea ----------------------------------------------------------------------------
        self._gitea_requests = Counter(
            PREFIX + "gitea_requests",
            "HTTP requests to Gitea by endpoint class and status code ('error': no answer).",
            ["endpoint", "code"], registry=r,
        )  # fmt: skip
        self._gitea_latency = Histogram(
            PREFIX + "gitea_request_duration_seconds", "Latency of one HTTP request to Gitea.",
            ["endpoint"], buckets=REQUEST_BUCKETS, registry=r,
        )  # fmt: skip
        self._rate_waits = Counter(
            PREFIX + "gitea_rate_limit_waits",
            "Times the operator waited because Gitea asked it to (429/503 Retry-After).",
            registry=r,
        )
        self._rate_wait_seconds = Counter(
            PREFIX + "gitea_rate_limit_wait_seconds", "Seconds spent waiting on Retry-After.",
            registry=r,
        )  # fmt: skip

        # -- Kubernetes, reconcile, webhook ---------------------------------------------------
        self._kube_writes = Counter(
            PREFIX + "kube_writes", "Kubernetes API writes by verb, resource and outcome.",
            ["verb", "resource", "outcome"], registry=r,
        )  # fmt: skip
        self._reconcile = Histogram(
            PREFIX + "reconcile_duration_seconds", "Duration of one reconcile pass.",
            ["result"], buckets=REQUEST_BUCKETS, registry=r,
        )  # fmt: skip
        self._reconcile_errors = Counter(
            PREFIX + "reconcile_errors", "Reconcile passes that raised (and were retried).",
            registry=r,
        )  # fmt: skip
        self._webhook = Counter(
            PREFIX + "webhook_deliveries", "Gitea webhook deliveries received, by outcome.",
            ["outcome"], registry=r,
        )  # fmt: skip
        self.workqueue = WorkQueueMetrics(r)
        # Job ids already observed per group, so a level-triggered caller that lists the
        # same job on every poll observes it once (bounded: oldest ids are forgotten).
        self._seen: dict[tuple[str, str, str], OrderedDict[int, float]] = {}

    # -- exposition ---------------------------------------------------------------------------

    def render(self) -> bytes:
        """The registry in Prometheus text format (what ``GET /metrics`` returns)."""
        return generate_latest(self.registry)

    # -- per RunnerGroup ----------------------------------------------------------------------

    def group_observed(
        self,
        namespace: str,
        name: str,
        *,
        queued: int,
        starting: int,
        idle: int,
        busy: int,
        desired: int,
        max_active: int,
        ready: bool,
        failed: int | None = None,
    ) -> None:
        """One reconcile pass's view of a group: the gauges are set, never accumulated."""
        self._queued.labels(namespace, name).set(queued)
        for state, count in zip(RUNNER_STATES, (starting, idle, busy), strict=True):
            self._runners.labels(namespace, name, state).set(count)
        self._desired.labels(namespace, name).set(desired)
        self._max.labels(namespace, name).set(max_active)
        self._ready.labels(namespace, name).set(1 if ready else 0)
        if failed is not None:
            self._failed_now.labels(namespace, name).set(failed)

    def group_ready(self, namespace: str, name: str, ready: bool) -> None:
        """Only the Ready gauge, for passes that end before counting (a Gitea or spec error)."""
        self._ready.labels(namespace, name).set(1 if ready else 0)

    def runners_created(self, namespace: str, name: str, n: int = 1) -> None:
        if n > 0:
            self._created.labels(namespace, name).inc(n)

    def job_rerun(self, namespace: str, name: str, reason: str) -> None:
        """``reason`` is a Pod's cause of loss, which Kubernetes components name freely."""
        self._reruns.labels(namespace, name, self._bounded("reruns", reason)).inc()

    def runner_reaped(self, namespace: str, name: str, reason: str, n: int = 1) -> None:
        """``reason`` is a short fixed word (``idle_timeout``, ``teardown`` ...), never a name."""
        if n > 0:
            self._reaped.labels(namespace, name, self._bounded("reaped", reason)).inc(n)

    def _bounded(self, metric: str, reason: str) -> str:
        """The first MAX_REASONS distinct reasons of a metric keep their name; later ones
        count as ``other``, so a reason nobody foresaw cannot multiply the series."""
        seen = self._reasons.setdefault(metric, set())
        if reason in seen or len(seen) < MAX_REASONS:
            seen.add(reason)
            return reason
        return "other"

    def runner_job_failed(self, namespace: str, name: str, n: int = 1) -> None:
        if n > 0:
            self._failed.labels(namespace, name).inc(n)

    def job_startup_latency(self, namespace: str, name: str, seconds: float) -> None:
        self._startup.labels(namespace, name).observe(max(0.0, seconds))

    def job_duration(self, namespace: str, name: str, seconds: float) -> None:
        self._duration_groups.setdefault(namespace, set()).add(name)
        self._duration.labels(namespace).observe(max(0.0, seconds))

    def observe_jobs(
        self,
        namespace: str,
        name: str,
        jobs: Iterable[ActionJob],
        ours: Callable[[ActionJob], bool],
    ) -> None:
        """Feed the latency histograms from Gitea's job list: each job that ``ours`` accepts
        (taken by one of the group's runners) is observed once when first seen started and
        once when first seen finished. Safe to call with the same jobs on every poll; after
        a restart, jobs still listed are observed again (once)."""
        for what in ("started", "finished"):
            self._prune(self._seen.get((namespace, name, what)))
        for job in jobs:
            if not job.runner_id or not ours(job):
                continue
            latency = startup_latency(job)
            if latency is not None and self._first_time(namespace, name, "started", job.id):
                self.job_startup_latency(namespace, name, latency)
            duration = execution_time(job)
            if duration is not None and self._first_time(namespace, name, "finished", job.id):
                self.job_duration(namespace, name, duration)

    def _first_time(self, namespace: str, name: str, what: str, job_id: int) -> bool:
        seen = self._seen.setdefault((namespace, name, what), OrderedDict())
        now = self._clock()
        first = job_id not in seen
        seen[job_id] = now  # listed again: remembered for another TTL
        seen.move_to_end(job_id)
        self._prune(seen)
        return first

    def _prune(self, seen: OrderedDict[int, float] | None) -> None:
        now = self._clock()
        while seen and (
            len(seen) > SEEN_JOBS_PER_GROUP or now - next(iter(seen.values())) > SEEN_JOBS_TTL
        ):
            seen.popitem(last=False)

    def forget_group(self, namespace: str, name: str) -> None:
        """Drop every series of a deleted group, so dashboards do not show it forever."""
        for what in ("started", "finished"):
            self._seen.pop((namespace, name, what), None)
        for metric in self._group_series:
            _remove(metric, (namespace, name))
        for state in RUNNER_STATES:
            _remove(self._runners, (namespace, name, state))
        fed = self._duration_groups.get(namespace, set())
        fed.discard(name)
        if not fed:
            self._duration_groups.pop(namespace, None)
            _remove(self._duration, (namespace,))
        for counter in (self._reaped, self._reruns):
            for labels in _label_sets(counter):
                if labels[:2] == (namespace, name):
                    _remove(counter, labels)

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

    def webhook_delivery(self, outcome: str) -> None:
        self._webhook.labels(outcome).inc()

    def set_leader(self, leader: bool) -> None:
        self._leader.set(1 if leader else 0)


def _label_sets(metric: Gauge | Counter | Histogram) -> list[tuple[str, ...]]:
    # prometheus-client keeps children in a dict keyed by label values; there is no public
    # listing, and removing by a known label tuple is the public ``remove``.
    children = getattr(metric, "_metrics", {})
    return [tuple(k) for k in list(children)]


def _remove(metric: Gauge | Counter | Histogram, labels: tuple[str, ...]) -> None:
    if labels in _label_sets(metric):
        metric.remove(*labels)
