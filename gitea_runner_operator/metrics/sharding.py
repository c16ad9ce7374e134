"""The series of ``--sharding``: the capacity domains one replica holds, the hand-overs it
took part in, and how long a domain waited for this replica once its previous owner left.

Unlabelled but for a fixed ``reason``: each replica exports its own, and Prometheus's
target labels (pod, instance) tell the replicas apart, as for every process series."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from prometheus_client import CollectorRegistry

from gitea_runner_operator.metrics.names import Series

# Why a domain came or went: ``taken`` and ``released`` by a plan after a read of the
# Leases, ``stepped_down`` every domain held when the Lease was not renewed by the renew
# deadline (or another replica removed it), ``stopping`` every domain held at a stop.
HANDOVER_REASONS: Final = ("taken", "released", "stepped_down", "stopping")
# A released domain moves in a round or two (2 s each); one whose owner died waits for its
# Lease to lapse (15 s) before it is seen gone, and these count from then.
HANDOVER_BUCKETS: Final = (0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120)


class ShardingMetrics:
    """The hook sharding/leases/round.Sharding calls."""

    def __init__(self, registry: CollectorRegistry) -> None:
        series = Series(registry)
        self._held = series.gauge(
            "domains_held", "Capacity domains this replica holds (--sharding; else 0)."
        )
        self._moves = series.counter(
            "domain_handovers",
            "Capacity domains this replica took or gave up, by reason "
            "(taken, released, stepped_down, stopping).",
            ["reason"],
        )
        self._received = series.gauge(
            "watch_events_received",
            "Watch events the API server sent this replica since it started, by resource "
            "(runnergroups, jobs, pods), kept or dropped as another replica's.",
            ["resource"],
        )
        self._wait = series.histogram(
            "domain_handover_seconds",
            "From the first read of the Leases without a domain's previous owner (released "
            "or lapsed) to this replica serving the domain.",
            buckets=HANDOVER_BUCKETS,
        )

    def bind(self, held: Callable[[], int]) -> None:
        """Read the number of held domains at scrape time; every reason starts at 0, so a
        rate over the first hand-over is not lost."""
        self._held.set_function(lambda: float(held()))
        for reason in HANDOVER_REASONS:
            self._moves.labels(reason)

    def bind_received(self, resource: str, received: Callable[[], int]) -> None:
        """Read a resource's watch events received at scrape time."""
        self._received.labels(resource).set_function(lambda: float(received()))

    def moved(self, reason: str, domains: int) -> None:
        if domains:
            self._moves.labels(reason).inc(domains)

    def waited(self, seconds: float) -> None:
        self._wait.observe(max(0.0, seconds))
