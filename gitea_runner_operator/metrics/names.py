"""The names, label sets and buckets of every series, and the helpers that keep label
sets fixed: one file that the docs' table and the alert rules are checked against."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

PREFIX: Final = "gitea_runner_operator_"
CONTENT_TYPE: Final = CONTENT_TYPE_PLAIN_0_0_4
GROUP_LABELS: Final = ("namespace", "runnergroup")
RUNNER_STATES: Final = ("starting", "idle", "busy")
# Why a group's matching queued job is not running yet (waiting_jobs' reason label).
WAITING_REASONS: Final = ("starting_runner", "at_capacity", "held_back", "served_by_peer")

# Seconds. Start-up latency spans a poll interval plus a Pod start (image pull): 1 s .. 30 min.
LATENCY_BUCKETS: Final = (1, 2.5, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1800)
# Job execution: seconds to hours.
DURATION_BUCKETS: Final = (5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400)
# HTTP requests and reconcile passes: milliseconds to the 30 s client timeout.
REQUEST_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
QUEUE_BUCKETS: Final = (0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# How late the event loop wakes: a healthy loop is under a few ms; the Lease's renew deadline
# is 10 s.
LAG_BUCKETS: Final = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

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


def label_sets(metric: Gauge | Counter | Histogram) -> list[tuple[str, ...]]:
    # prometheus-client keeps children in a dict keyed by label values; there is no public
    # listing, and removing by a known label tuple is the public ``remove``.
    children = getattr(metric, "_metrics", {})
    return [tuple(k) for k in list(children)]


def remove_series(metric: Gauge | Counter | Histogram, labels: tuple[str, ...]) -> None:
    if labels in label_sets(metric):
        metric.remove(*labels)


class Series:
    """Makes series on one registry, each named under :data:`PREFIX`: the naming rule of
    every series the operator exports, written once."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def gauge(self, name: str, doc: str, labels: Sequence[str] = ()) -> Gauge:
        return Gauge(PREFIX + name, doc, labels, registry=self._registry)

    def counter(self, name: str, doc: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(PREFIX + name, doc, labels, registry=self._registry)

    def histogram(
        self, name: str, doc: str, labels: Sequence[str] = (), *, buckets: Sequence[float]
    ) -> Histogram:
        return Histogram(PREFIX + name, doc, labels, buckets=buckets, registry=self._registry)
