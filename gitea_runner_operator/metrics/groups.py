"""The per-RunnerGroup series: what one group saw and did, labelled by ``namespace`` and
``runnergroup`` only, and dropped when the group is deleted."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.naming import GroupKey
from gitea_runner_operator.api.timings import execution_time, startup_latency
from gitea_runner_operator.kit.lru import LRU
from gitea_runner_operator.metrics.names import (
    DURATION_BUCKETS,
    GROUP_LABELS,
    LATENCY_BUCKETS,
    MAX_REASONS,
    RUNNER_STATES,
    SEEN_JOBS_PER_GROUP,
    SEEN_JOBS_TTL,
    Series,
    label_sets,
    remove_series,
)


class GroupSeries:
    """The series of every RunnerGroup, on ``registry``."""

    def __init__(self, registry: CollectorRegistry, clock: Callable[[], float]) -> None:
        self._clock = clock
        series = Series(registry)
        g = GROUP_LABELS
        self._queued = series.gauge(
            "queued_jobs",
            "Queued Gitea jobs the group's labels can run, at the last poll (demand).",
            g,
        )
        self._runners = series.gauge(
            "runners", "Alive runner Jobs of the group by state.", [*g, "state"]
        )
        self._desired = series.gauge(
            "desired_runners",
            "Runner Jobs the group wants alive after this pass (alive + to create - to reap).",
            g,
        )
        self._max = series.gauge("max_active_runners", "The group's spec.maxActiveRunners.", g)
        self._ready = series.gauge(
            "ready", "1 when the group's Ready condition is True, else 0.", g
        )
        self._checked = series.gauge(
            "last_check_timestamp_seconds",
            "When Gitea last answered the group's poll (the answer its last pass used); "
            "status.lastCheckTime is written only with another change.",
            g,
        )
        self._failed_now = series.gauge(
            "failed_runner_jobs",
            "Failed runner Jobs of the group that exist now (kept for ttlSecondsAfterFinished).",
            g,
        )
        self._created = series.counter("runners_created", "Runner Jobs created.", g)
        self._reaped = series.counter(
            "runners_reaped", "Runner Jobs deleted by the operator, by reason.", [*g, "reason"]
        )
        self._reruns = series.counter(
            "jobs_rerun",
            "Gitea jobs re-run because their runner was lost, by cause (docs/lost-runners.md).",
            [*g, "reason"],
        )
        self._failed = series.counter("runner_jobs_failed", "Runner Jobs seen turning Failed.", g)
        self._startup = series.histogram(
            "job_startup_latency_seconds",
            "Gitea job created -> taken by one of the group's runners (Gitea's timestamps).",
            g,
            buckets=LATENCY_BUCKETS,
        )
        # Per namespace, not per group: how long a tenant's jobs run is the tenant's figure
        # (capacity planning), and 14 series per group were a third of a group's series.
        self._duration = series.histogram(
            "job_duration_seconds",
            "Gitea job started -> finished on a runner of a group in this namespace "
            "(Gitea's timestamps).",
            ["namespace"],
            buckets=DURATION_BUCKETS,
        )
        # --sharding only: one series per group, on the replica that serves it (dropped when
        # the group moves away), so the groups of a replica and its domains can be counted.
        self._domain = series.gauge(
            "group_domain_info",
            "Always 1: the capacity domain of a group and the replica serving it (--sharding).",
            [*g, "domain", "replica"],
        )
        self._domain_of: dict[tuple[str, str], tuple[str, str]] = {}
        self._group_series: tuple[Gauge | Counter | Histogram, ...] = (
            self._queued, self._desired, self._max, self._ready, self._failed_now,
            self._created, self._failed, self._startup, self._checked,
        )  # fmt: skip
        # Distinct ``reason`` values seen per metric; past MAX_REASONS they count as "other".
        self._reasons: dict[str, set[str]] = {}
        # The groups that fed a namespace's duration histogram: it goes with the last of them.
        self._duration_groups: dict[str, set[str]] = {}

        # Job ids already observed per group, so a level-triggered caller that lists the
        # same job on every poll observes it once (bounded: oldest ids are forgotten).
        self._seen: dict[tuple[str, str, str], LRU[int, float]] = {}

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

    def group_served(self, namespace: str, name: str, domain: str, replica: str) -> None:
        """The group's domain and serving replica; the series of an earlier domain goes."""
        now = (domain, replica)
        before = self._domain_of.get((namespace, name))
        if before == now:
            return
        if before is not None:
            remove_series(self._domain, (namespace, name, *before))
        self._domain.labels(namespace, name, domain, replica).set(1)
        self._domain_of[(namespace, name)] = now

    def group_checked(self, namespace: str, name: str, when: float) -> None:
        """``when``: seconds since the epoch of the Gitea answer a pass used."""
        self._checked.labels(namespace, name).set(when)

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
        seen = self._seen.setdefault((namespace, name, what), LRU(SEEN_JOBS_PER_GROUP))
        now = self._clock()
        first = job_id not in seen
        seen.put(job_id, now)  # listed again: remembered for another TTL
        self._prune(seen)
        return first

    def _prune(self, seen: LRU[int, float] | None) -> None:
        now = self._clock()
        while seen and (oldest := seen.oldest()) is not None and now - oldest > SEEN_JOBS_TTL:
            seen.drop_oldest()

    def forget(self, key: str) -> None:
        """As a holder of per-group memory (kit/group_memory.py)."""
        namespace, name = GroupKey.parse(key)
        self.forget_group(namespace, name)

    def knows(self, key: str) -> bool:
        group = tuple(GroupKey.parse(key))
        if any(k[:2] == group for k in self._seen) or group in self._domain_of:
            return True
        series = (*self._group_series, self._runners, self._reaped, self._reruns)
        return any(labels[:2] == group for m in series for labels in label_sets(m))

    def forget_group(self, namespace: str, name: str) -> None:
        """Drop every series of a deleted group, so dashboards do not show it forever; and
        of a group another replica serves now (--sharding), so that each group's series
        come from one replica only."""
        for what in ("started", "finished"):
            self._seen.pop((namespace, name, what), None)
        for metric in self._group_series:
            remove_series(metric, (namespace, name))
        for state in RUNNER_STATES:
            remove_series(self._runners, (namespace, name, state))
        served = self._domain_of.pop((namespace, name), None)
        if served is not None:
            remove_series(self._domain, (namespace, name, *served))
        fed = self._duration_groups.get(namespace, set())
        fed.discard(name)
        if not fed:
            self._duration_groups.pop(namespace, None)
            remove_series(self._duration, (namespace,))
        for counter in (self._reaped, self._reruns):
            for labels in label_sets(counter):
                if labels[:2] == (namespace, name):
                    remove_series(counter, labels)
