"""One process-wide memory budget for what tenants' Gitea servers send, shared fairly by
namespace: a namespace is a tenant, and its groups together may hold at most their share.

Each answer was bounded on its own (forge/limits.py), but not their sum: five groups of one
tenant, each within every cap, kept 354 MiB and peaked at 603 MiB of RSS while their answers
were read, against a 384 Mi container limit; the OOM kill took the operator from every
tenant. Here the bytes are charged *while* they are read and parsed (forge/http.py through
forge/limits.AnswerBudget), and what an observation keeps is charged for as long as it is
kept (forge/budget.py), so the peak is bounded, not only what stays.

Half the budget is reserved: each namespace that polled within ``ACTIVE_FOR`` seconds (each
poll notes its namespace) is guaranteed an equal part of it, so one tenant with many groups
gets as much as a tenant with one. The other half is a pool a namespace may borrow from past
its guaranteed part, at most ``1/min(tenants, POOL_BORROWERS)`` of it, while the pool has
room: an equal share alone would leave a busy tenant 154 KiB of the chart's 384 Mi among
1,000 namespaces, less than one page of 50 jobs read and parsed, though nearly all of them
hold a few hundred bytes of an empty queue. Alone, a namespace may hold the whole budget;
whatever the others borrow, each keeps its guaranteed part, and the sum of all never passes
the budget. Past its ceiling, its group's read stops with :class:`OverShare`, which names the
budget and the figures.

The budget comes from the container's memory limit (cgroup v2 ``memory.max``, or v1
``memory.limit_in_bytes``): ``LIMIT_FRACTION`` of it, the rest being the operator's own
(its caches, the Kubernetes client, the interpreter); ``UNLIMITED_BUDGET`` when there is no
limit; ``--tenant-memory-budget`` sets it outright.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

MIB: Final = 1024 * 1024
LIMIT_FRACTION: Final = 0.4
UNLIMITED_BUDGET: Final = 256 * MIB
MIN_BUDGET: Final = 16 * MIB
ACTIVE_FOR: Final = 600.0
# The part of the budget reserved in equal parts for the namespaces that poll; the rest is the
# pool they borrow from, each at most 1/min(tenants, POOL_BORROWERS) of it.
RESERVED_FRACTION: Final = 0.5
POOL_BORROWERS: Final = 4
# A limit above this is no limit (cgroup v1 writes a huge number for "unlimited").
_NO_LIMIT: Final = 1 << 50
CGROUP_FILES: Final = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


PROC_CGROUP: Final = Path("/proc/self/cgroup")


def memory_limit(
    files: tuple[Path, ...] | None = None,
    proc_cgroup: Path = PROC_CGROUP,
    mounts: tuple[Path, Path] = CGROUP_FILES,
) -> int | None:
    """The container's memory limit in bytes, or None when it has none (or none is known).

    The lowest limit of the process's own cgroup and those above it, as far as the mount
    shows them (without a cgroup namespace the mount shows the whole tree, and the process's
    limit is its own cgroup's, not the root's), then the mounts' roots: ``mounts``, cgroup
    v2's file and v1's; ``files`` instead, those files alone."""
    if files is None:
        files = (*_own_cgroup_files(proc_cgroup, mounts), *mounts)
    limits = [value for path in files if (value := _limit_in(path)) is not None]
    return min(limits, default=None)


def _limit_in(path: Path) -> int | None:
    try:
        value = int(path.read_text().strip())
    except (OSError, ValueError):  # missing, or "max": no limit there
        return None
    return value if 0 < value < _NO_LIMIT else None


def _own_cgroup_files(proc_cgroup: Path, mounts: tuple[Path, Path]) -> list[Path]:
    """The limit files of the process's cgroup and of each one above it (cgroup v2's line
    ``0::/path``, v1's ``N:memory:/path``); none where the path is the root or unreadable."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return []
    out: list[Path] = []
    for line in lines:
        hierarchy, controllers, where = [*line.split(":", 2), "", ""][:3]
        if hierarchy == "0" and not controllers:
            root, name = mounts[0].parent, mounts[0].name
        elif "memory" in controllers.split(","):
            root, name = mounts[1].parent, mounts[1].name
        else:
            continue
        parts = [part for part in where.split("/") if part and part != ".."]
        out += [root.joinpath(*parts[:depth], name) for depth in range(len(parts), 0, -1)]
    return out


def default_budget(limit: int | None) -> int:
    """The budget for a container limit of ``limit`` bytes (None: unlimited)."""
    if limit is None:
        return UNLIMITED_BUDGET
    return max(MIN_BUDGET, int(limit * LIMIT_FRACTION))


class OverShare(Exception):
    """A namespace's groups would hold more than its share; the figures say how much."""

    def __init__(
        self,
        namespace: str,
        held: int,
        wanted: int,
        share: int,
        budget: int,
        tenants: int,
        why: str = "",
    ):
        self.namespace, self.held, self.wanted = namespace, held, wanted
        self.share, self.budget, self.tenants = share, budget, tenants
        super().__init__(
            f"the namespace's share of the operator's memory budget for tenants' data is "
            f"spent: {held / MIB:.1f} MiB held and {wanted / MIB:.1f} MiB more asked, of a "
            f"share of {share / MIB:.1f} MiB ({budget / MIB:.0f} MiB shared by {tenants} "
            f"namespace(s)){why}"
        )


class TenantBudget:
    """Bytes held per namespace, against ``total`` shared by the namespaces that poll."""

    def __init__(
        self,
        total: int,
        *,
        active_for: float = ACTIVE_FOR,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self._active_for = active_for
        self._clock = clock
        self._held: dict[str, int] = {}
        self._total_held = 0
        self._seen: dict[str, float] = {}  # namespace -> when it last polled
        self.peak: dict[str, int] = {}  # the most each namespace held, for tests and benchmarks

    def note(self, namespace: str) -> None:
        """``namespace`` polls: it counts among the tenants for ``active_for`` seconds."""
        self._seen.pop(namespace, None)
        self._seen[namespace] = self._clock()  # most recent last

    def tenants(self) -> int:
        cutoff = self._clock() - self._active_for
        for namespace, at in list(self._seen.items()):
            if at >= cutoff:
                break
            if not self._held.get(namespace):
                del self._seen[namespace]
        return max(1, len(self._seen.keys() | self._held.keys()))

    def _parts(self, tenants: int) -> tuple[int, int, int]:
        """(guaranteed part, ceiling, pool) for ``tenants`` namespaces."""
        reserved = int(self.total * RESERVED_FRACTION)
        pool = self.total - reserved
        guaranteed = reserved // tenants
        return guaranteed, guaranteed + pool // min(tenants, POOL_BORROWERS), pool

    def guaranteed(self) -> int:
        """What each namespace may hold whatever the others hold."""
        return self._parts(self.tenants())[0]

    def share(self) -> int:
        """The most one namespace may hold now: its guaranteed part and its part of the pool."""
        return self._parts(self.tenants())[1]

    def held(self, namespace: str) -> int:
        return self._held.get(namespace, 0)

    def _borrowed(self, guaranteed: int, but: str) -> int:
        """What the namespaces other than ``but`` hold past their guaranteed part."""
        return sum(max(0, held - guaranteed) for ns, held in self._held.items() if ns != but)

    def charge(self, namespace: str, count: int) -> None:
        """Hold ``count`` more bytes for ``namespace``, or raise :class:`OverShare`."""
        held = self._held.get(namespace, 0)
        self.note(namespace)
        after, tenants = held + count, self.tenants()
        guaranteed, share, pool = self._parts(tenants)
        why = ""
        if after > share:
            pass
        elif (
            after > guaranteed and self._borrowed(guaranteed, namespace) + after - guaranteed > pool
        ):
            share = guaranteed
            why = "; the part of the budget namespaces borrow beyond their share is in use"
        elif self._total_held + count <= self.total:  # not so when parts shrank as others came
            self._held[namespace] = after
            self._total_held += count
            if after > self.peak.get(namespace, 0):
                self.peak[namespace] = after
            return
        raise OverShare(namespace, held, count, share, self.total, tenants, why)

    def release(self, namespace: str, count: int) -> None:
        held = self._held.get(namespace, 0)
        self._total_held -= min(count, held)
        left = held - count
        if left > 0:
            self._held[namespace] = left
        else:
            self._held.pop(namespace, None)

    def lease(self, namespace: str) -> Lease:
        return Lease(self, namespace)


class Lease:
    """What one piece of work (a fetch, a kept observation) holds for its namespace: charged
    bit by bit, released bit by bit or all at once."""

    __slots__ = ("_budget", "held", "namespace")

    def __init__(self, budget: TenantBudget, namespace: str) -> None:
        self._budget, self.namespace = budget, namespace
        self.held = 0

    def charge(self, count: int) -> None:
        self._budget.charge(self.namespace, count)
        self.held += count

    def release(self, count: int) -> None:
        count = min(count, self.held)
        self._budget.release(self.namespace, count)
        self.held -= count

    def close(self) -> None:
        self.release(self.held)
