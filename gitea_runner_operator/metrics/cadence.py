"""The series of the poll interval that follows the webhook evidence (api/cadence.py): how
many groups poll at which interval's reason, and how often a stretched poll shrank back, by
why. Labelled by the fixed set of reasons only (docs/decisions/0004-bounded-metric-labels.md);
which group polls how often is its ``status.poll``."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from prometheus_client import CollectorRegistry

from gitea_runner_operator.api.cadence import Cadence, CadenceReason
from gitea_runner_operator.metrics.names import Series


class CadenceMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        series = Series(registry)
        self._groups = series.gauge(
            "poll_cadence_groups",
            "RunnerGroups by why their Gitea poll runs at the interval in force "
            "(DeliveriesArrive: stretched to spec.webhook.pollInterval).",
            ["reason"],
        )
        self._shrinks = series.counter(
            "poll_interval_shrinks",
            "Times a group's stretched poll fell back to spec.pollInterval, by why.",
            ["reason"],
        )

    def bind(self, counts: Callable[[], Mapping[CadenceReason, int]]) -> None:
        """Read the groups per reason at scrape time; every reason starts at 0."""
        for reason in CadenceReason:
            self._groups.labels(reason.value).set_function(_count_of(counts, reason))
            if not reason.stretched:
                self._shrinks.labels(reason.value)

    def changed(self, before: Cadence | None, after: Cadence) -> None:
        if before is not None and before.reason.stretched and not after.reason.stretched:
            self._shrinks.labels(after.reason.value).inc()


def _count_of(
    counts: Callable[[], Mapping[CadenceReason, int]], reason: CadenceReason
) -> Callable[[], float]:
    return lambda: float(counts().get(reason, 0))
