"""What a group's poll task learns of its webhook deliveries, for the interval rule of
api/cadence.py: when the last verified delivery came, which queued jobs deliveries
announced, and when a poll last found one that none did.

Kept by the group's task, so it lives as long as the task: a restarted process or a replica
that takes the group over starts with none (and polls at ``spec.pollInterval`` until a
delivery comes). A task restarted for a new spec keeps it unless the webhook changed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gitea_runner_operator.api.cadence import Cadence, CadenceReason, Evidence, decide, stretch_of
from gitea_runner_operator.api.observation import Snapshot
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.api.scope import labels_fit
from gitea_runner_operator.kit.lru import LRU

# Queued jobs a group remembers as announced: more than a burst of deliveries between polls.
ANNOUNCED_MAX = 512
# Gitea URLs whose latest delivery is remembered: more than the URLs of a replica's groups.
GITEAS_MAX = 4096


class GiteaDeliveries:
    """When a verified delivery last came for any group of each Gitea URL: evidence that the
    way from that Gitea to this replica works (api/cadence.py, the delivery gap)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._at: LRU[str, float] = LRU(GITEAS_MAX)

    def heard(self, url: str) -> None:
        self._at.put(url, self._clock())

    def at(self, url: str) -> float | None:
        return self._at.get(url)


class Deliveries:
    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        origin: CadenceReason = CadenceReason.STARTED,
    ) -> None:
        self._clock = clock
        self.evidence = Evidence(origin)
        self._announced: LRU[int, None] = LRU(ANNOUNCED_MAX)
        self.missed = 0  # queued jobs found that no delivery announced (tests, benchmarks)

    def heard(self, job_id: int | None = None) -> None:
        """A verified delivery for the group's scope arrived; ``job_id``: the queued job it
        announces, if it is about one."""
        if job_id is not None:
            self._announced.put(job_id, None)
        self.evidence = Evidence(self.evidence.origin, self._clock(), self.evidence.last_miss)

    def handed_over(self) -> None:
        """This replica took the group over (or it is polled afresh): what was heard before
        vouches for nothing now."""
        self.evidence = Evidence(CadenceReason.HANDED_OVER)
        self._announced.clear()

    def judge(self, before: Snapshot | None, after: Snapshot, offered: frozenset[str]) -> list[int]:
        """The queued jobs of the group (its labels fit) that ``after`` lists, ``before`` did
        not, and no delivery announced: each is a delivery missed (or not sent yet: the next
        delivery forgives it). Nothing is judged without an earlier answer to compare with."""
        if before is None or before.observation is None or after.observation is None:
            return []
        seen = {job.id for job in before.observation.queued}
        missed = [
            job.id
            for job in after.observation.queued
            if job.id not in seen
            and job.id not in self._announced
            and labels_fit(job.labels, offered)
        ]
        if missed:
            self.missed += len(missed)
            self.evidence = Evidence(
                self.evidence.origin, self.evidence.last_delivery, self._clock()
            )
        return missed

    def cadence(
        self,
        spec: RunnerGroupSpec,
        platform_max: float,
        hook_ok: bool | None,
        active: bool,
        gitea_heard: float | None = None,
    ) -> Cadence:
        base = spec.poll_interval_seconds
        webhook = spec.webhook
        wanted = webhook.poll_interval_seconds if webhook is not None else None
        return decide(
            self.evidence,
            now=self._clock(),
            base=base,
            stretched=stretch_of(base, wanted, platform_max),
            webhook=webhook is not None,
            active=active,
            managed=spec.manages_hook,
            hook_ok=hook_ok,
            gitea_heard=gitea_heard,
        )
