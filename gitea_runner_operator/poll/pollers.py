"""The poll tasks of every group: started, restarted on a new spec or when one has
stopped on its own, and stopped with their groups.

New tasks ask Gitea first at most ``FIRST_POLLS_PER_SECOND`` a second (``FIRST_POLLS_BURST``
at once): a replica that takes a thousand domains, or starts with a thousand groups, would
otherwise send a thousand polls in one breath. Gitea then answers late, the answers past
their timeout read as "Gitea unreachable" on every group, and the event loop stalls on the
answers that do come. A group created alone, or one a webhook wakes, polls at once.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Unpack

import structlog

from gitea_runner_operator.api.cadence import CadenceReason
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.kit.bucket import Bucket
from gitea_runner_operator.kit.lru import LRU
from gitea_runner_operator.poll.deliveries import GiteaDeliveries
from gitea_runner_operator.poll.poller import GroupPoller, ObserveFn, PollerOptions
from gitea_runner_operator.poll.steps import GiteaStep
from gitea_runner_operator.poll.task_faults import failure_log

log = structlog.get_logger(__name__)

FIRST_POLLS_PER_SECOND = 100.0  # 1,000 groups taken at once: their first polls over 10 s
# A burst of 100 let one tenant's 91 new groups (issue 45's attacks) poll in the same
# instant, and their first answers and passes set the healthy pickups' p99; 20 spreads
# them over 0.7 s.
FIRST_POLLS_BURST = 20


class Pollers:
    """Starts, restarts (on spec change) and stops the per-group pollers."""

    def __init__(
        self,
        observe: ObserveFn,
        notify: Callable[[str], None],
        steps: Sequence[GiteaStep] = (),
        **options: Unpack[PollerOptions],
    ) -> None:
        self._observe = observe
        self._notify = notify
        self._steps = tuple(steps)  # shared by every group's task (poll/steps.py)
        self._clock = options.get("clock", time.monotonic)
        # Deliveries heard per Gitea URL: a quiet group's hook is vouched for by its Gitea's.
        self._giteas = GiteaDeliveries(self._clock)
        self._options: PollerOptions = {
            "failures": failure_log(),
            "gitea_heard": self._giteas.at,
            **options,
        }
        self._pollers: dict[str, GroupPoller] = {}
        self._first_polls = Bucket(FIRST_POLLS_PER_SECOND, FIRST_POLLS_BURST, self._clock())
        # Groups this replica took over before their poller started (handed_over).
        self._taken: LRU[str, None] = LRU(100_000)

    def get(self, key: str) -> GroupPoller | None:
        return self._pollers.get(key)

    def keys(self) -> list[str]:
        return list(self._pollers)

    def specs(self) -> list[RunnerGroupSpec]:
        return [p.spec for p in self._pollers.values()]

    async def ensure(self, key: str, spec: RunnerGroupSpec) -> GroupPoller:
        """The group's poller for ``spec``: started, restarted on a new spec, and restarted
        when its task has ended on its own or hangs. Nothing else would notice a poll task
        that died: its group would keep its last answer and never be polled again."""
        current = self._pollers.get(key)
        if current is not None and current.spec == spec:
            if current.running and not current.hung:
                return current
            why = current.ended if not current.running else "no progress past its deadlines"
            log.error("poll task of the group stopped; restarting it", group=key, why=why)
        if current is not None:
            await current.stop()
        poller = GroupPoller(
            key,
            spec,
            self._observe,
            self._notify,
            self._steps,
            **self._options,
        )
        if current is not None:  # what the old task knew still holds
            poller.hooks, poller._order = current.hooks, current._order
            # Kept, and served only for the spec it came from (poll/last_good.py).
            poller.last_good.take(current.last_good)
            if current.spec.gitea.url == spec.gitea.url and _same_hook(current.spec, spec):
                poller.deliveries = current.deliveries
        if key in self._taken:
            self._taken.pop(key)
            poller.deliveries.handed_over()
        self._pollers[key] = poller
        poller.start(after=self._first_polls.reserve(self._clock()))
        return poller

    def heard(self, key: str, job_id: int | None) -> None:
        """A verified webhook delivery for the group's scope: evidence its deliveries arrive
        (poll/deliveries.py), and that its Gitea's reach this replica. Only for a group this
        replica polls."""
        poller = self._pollers.get(key)
        if poller is not None:
            poller.heard(job_id)
            self._giteas.heard(poller.spec.gitea.url)

    def handed_over(self, key: str) -> None:
        """This replica took ``key`` over from another (--sharding): its poll runs at
        ``spec.pollInterval`` until a delivery arrives here (api/cadence.py), whether its
        poller runs already or starts later."""
        poller = self._pollers.get(key)
        if poller is not None:
            poller.handed_over()
        else:
            self._taken.put(key, None)

    def cadences(self) -> Counter[CadenceReason]:
        """How many groups poll at which interval's reason (the series by reason)."""
        return Counter(p.cadence.reason for p in self._pollers.values() if p.cadence is not None)

    async def stop(self, key: str) -> None:
        poller = self._pollers.pop(key, None)
        if poller is not None:
            await poller.stop()

    async def forget(self, key: str) -> None:
        """As a holder of per-group memory (kit/group_memory.py): the task stops."""
        await self.stop(key)

    def knows(self, key: str) -> bool:
        return key in self._pollers

    async def stop_all(self) -> None:
        await asyncio.gather(*(self.stop(key) for key in list(self._pollers)))


def _same_hook(before: RunnerGroupSpec, after: RunnerGroupSpec) -> bool:
    """Whether deliveries heard for ``before`` vouch for ``after``: the same hook secret and
    scope (a new secret or scope is a new hook, unproven)."""
    old, new = before.webhook, after.webhook
    return (
        old is not None
        and new is not None
        and old.secret_ref == new.secret_ref
        and old.manage_hook == new.manage_hook
        and (before.scope, before.org, before.repo) == (after.scope, after.org, after.repo)
    )
