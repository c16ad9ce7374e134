"""The work queue's series (client-go's workqueue metrics)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gitea_runner_operator.metrics.names import PREFIX, QUEUE_BUCKETS


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
