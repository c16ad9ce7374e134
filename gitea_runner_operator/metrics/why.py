"""The series that say why jobs wait: unmatched jobs per Gitea and label set, and each
group's matching queued jobs by reason.

Declared here with the operator's other series, on the same registry, so one scrape shows
both; the why code (reconcile/why/) only hands them its counts. Cardinality is bounded: the
unmatched series by Gitea instance times at most ``unmatched.MAX_LABEL_SETS + 1`` label sets
(the rest add up under ``other``), the waiting series by group times four fixed reasons.
Ages are exported as the oldest job's creation time (Prometheus convention), so an alert
computes ``time() - x`` and the figure never goes stale between two reconciles.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import weakref
from collections.abc import Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry

from gitea_runner_operator.api.naming import GroupKey
from gitea_runner_operator.metrics.names import GROUP_LABELS, WAITING_REASONS, Series, label_sets


class Counted(Protocol):
    """What one unmatched series shows (reconcile/why/unmatched.Bucket)."""

    @property
    def count(self) -> int: ...

    @property
    def oldest(self) -> dt.datetime | None: ...


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, WhyMetrics] = weakref.WeakKeyDictionary()


class WhyMetrics:
    @classmethod
    def of(cls, registry: CollectorRegistry) -> WhyMetrics:
        """The one set of these series in ``registry``: every leadership term builds a new
        reconciler over the process's one registry, and a second registration of the same
        names raises (a leader that lost and won back its Lease crashed on it)."""
        found = _BY_REGISTRY.get(registry)
        if found is None:
            found = _BY_REGISTRY[registry] = cls(registry)
        return found

    def __init__(self, registry: CollectorRegistry) -> None:
        series = Series(registry)
        u = ("gitea", "labels")
        self._unmatched = series.gauge(
            "unmatched_jobs",
            "Queued jobs that no RunnerGroup of that Gitea will serve, by label set "
            '(the largest sets on their own, the rest under labels="other").',
            u,
        )
        self._unmatched_since = series.gauge(
            "unmatched_oldest_job_created_timestamp_seconds",
            "When the oldest unmatched queued job of that Gitea and label set was queued.",
            u,
        )
        self._waiting = series.gauge(
            "waiting_jobs",
            "A group's matching queued jobs by why they are not running yet.",
            (*GROUP_LABELS, "reason"),
        )
        self._oldest = series.gauge(
            "oldest_queued_job_created_timestamp_seconds",
            "When the group's oldest matching queued job was queued (absent: none queued).",
            GROUP_LABELS,
        )
        self._shown: dict[str, set[str]] = {}  # Gitea URL -> label sets exported for it

    def unmatched(self, url: str, series: Mapping[tuple[str, str], Counted]) -> None:
        """Replace the series of one Gitea with this evaluation's."""
        wanted = {labels: b for (u, labels), b in series.items() if u == url}
        for gone in self._shown.get(url, set()) - set(wanted):
            for metric in (self._unmatched, self._unmatched_since):
                with contextlib.suppress(KeyError):
                    metric.remove(url, gone)
        for labels, bucket in wanted.items():
            self._unmatched.labels(url, labels).set(bucket.count)
            if bucket.oldest is not None:
                self._unmatched_since.labels(url, labels).set(bucket.oldest.timestamp())
            else:
                with contextlib.suppress(KeyError):
                    self._unmatched_since.remove(url, labels)
        if wanted:
            self._shown[url] = set(wanted)
        else:
            self._shown.pop(url, None)

    def waiting(
        self, namespace: str, name: str, counts: Mapping[str, int], oldest: float | None
    ) -> None:
        for reason in WAITING_REASONS:
            self._waiting.labels(namespace, name, reason).set(counts.get(reason, 0))
        if oldest is None:
            with contextlib.suppress(KeyError):
                self._oldest.remove(namespace, name)
        else:
            self._oldest.labels(namespace, name).set(oldest)

    def forget(self, key: str) -> None:
        """As a holder of per-group memory (kit/group_memory.py)."""
        namespace, name = GroupKey.parse(key)
        self.forget_group(namespace, name)

    def knows(self, key: str) -> bool:
        group = tuple(GroupKey.parse(key))
        return any(
            labels[:2] == group for m in (self._waiting, self._oldest) for labels in label_sets(m)
        )

    def forget_group(self, namespace: str, name: str) -> None:
        for reason in WAITING_REASONS:
            with contextlib.suppress(KeyError):
                self._waiting.remove(namespace, name, reason)
        with contextlib.suppress(KeyError):
            self._oldest.remove(namespace, name)
