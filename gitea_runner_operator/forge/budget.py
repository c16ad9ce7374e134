"""What an observation keeps, charged to its namespace's share of the tenant memory budget
(kit/tenant_budget.py) for as long as it is the latest answer of its scope.

A fetch's reads and parses are charged while they happen (forge/limits.AnswerBudget) and
released when the fetch ends; what it keeps (its jobs and runners) is charged here instead,
per scope key, and replaced by the next answer of that scope: five groups of one tenant on
five scopes then hold five answers against one share, not five shares.
"""

from __future__ import annotations

from collections.abc import Hashable

from gitea_runner_operator.api.gitea import ActionRunner
from gitea_runner_operator.api.observation import Observation
from gitea_runner_operator.forge.errors import GiteaTenantBudget
from gitea_runner_operator.kit.tenant_budget import Lease, OverShare, TenantBudget

# Python objects of one kept item besides its strings (a model, its dict, a tuple, ints,
# datetimes), and of each string besides its characters (its header, and its slot in the
# interpreter's table of interned strings: labels are interned): rounded up from tracemalloc
# on 200 jobs parsed from Gitea pages (tests/unit/forge/test_kept_size.py: a label of its
# own each, 1,688 B a job held, 1,877 B charged; 64 labels of 45 characters, 8,151 B held,
# 11,048 B charged; one shared label, 1,631 B held, 1,777 B charged). The figures before
# (900 and 60) charged up to 28 % less than was held.
ITEM_BYTES = 1400
STRING_BYTES = 100
POINTER_BYTES = 8


def kept_size(observation: Observation) -> int:
    """About what ``observation`` holds in memory, in bytes. A label text is counted once
    however many jobs carry it (api/gitea.ActionJob interns them), a pointer for the rest."""
    jobs = (*observation.queued, *observation.in_progress, *observation.finished)
    seen: set[int] = set()
    size = sum(_runner_size(runner) for runner in observation.runners)
    for job in jobs:
        size += ITEM_BYTES + sum(STRING_BYTES + len(s) for s in (job.name, job.url, job.handle))
        for label in job.labels:
            if id(label) in seen:
                size += POINTER_BYTES
            else:
                seen.add(id(label))
                size += STRING_BYTES + len(label)
    return size


def _runner_size(runner: ActionRunner) -> int:
    names = (runner.name, *(label.name for label in runner.labels))
    return ITEM_BYTES * (1 + len(runner.labels)) + sum(STRING_BYTES + len(s) for s in names)


class KeptAnswers:
    """The kept answer of each scope key, charged to the namespace that asked for it."""

    def __init__(self, budget: TenantBudget | None) -> None:
        self.budget = budget
        self._kept: dict[Hashable, Lease] = {}

    def lease(self, namespace: str) -> Lease | None:
        """What a fetch for ``namespace`` charges while it reads (None: no budget)."""
        if self.budget is None or not namespace:
            return None
        return self.budget.lease(namespace)

    def keep(self, key: Hashable, namespace: str, observation: Observation) -> None:
        """``observation`` is now the latest answer of ``key``: charged in place of the one
        before (both are held while the new one is charged: that is the peak). Raises
        :class:`GiteaTenantBudget` (and drops the one before) past the share."""
        lease = self.lease(namespace)
        if lease is None:
            return
        try:
            lease.charge(kept_size(observation))
        except OverShare as exc:
            self.drop(key)
            raise GiteaTenantBudget(f"{exc}; the answer is not kept") from None
        self.drop(key)
        self._kept[key] = lease

    def drop(self, key: Hashable) -> None:
        """The answer of ``key`` is no longer kept (its scope is forgotten, or failed)."""
        lease = self._kept.pop(key, None)
        if lease is not None:
            lease.close()

    def __len__(self) -> int:
        return len(self._kept)
