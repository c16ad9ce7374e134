"""The work queue's series (client-go's workqueue metrics)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry

from gitea_runner_operator.metrics.names import QUEUE_BUCKETS, Series


class WorkQueueMetrics:
    """The hook :class:`~gitea_runner_operator.runtime.workqueue.WorkQueue` calls. Depth and
    longest-running are read from the queue at scrape time (``bind``), so they are never stale."""

    def __init__(self, registry: CollectorRegistry) -> None:
        series = Series(registry)
        self._depth = series.gauge("workqueue_depth", "RunnerGroup keys waiting in the work queue.")
        self._longest = series.gauge(
            "workqueue_longest_running_processor_seconds",
            "How long the longest reconcile in progress has been running.",
        )
        self._adds = series.counter("workqueue_adds", "Keys queued (after de-duplication).")
        self._retries = series.counter(
            "workqueue_retries", "Keys re-queued with back-off after a failed reconcile."
        )
        self._queued = series.histogram(
            "workqueue_queue_duration_seconds",
            "How long a key waited in the queue before a worker took it.",
            buckets=QUEUE_BUCKETS,
        )
        self._work = series.histogram(
            "workqueue_work_duration_seconds",
            "How long a worker held a key (one reconcile pass).",
            buckets=QUEUE_BUCKETS,
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
