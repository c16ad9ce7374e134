"""A group's runner creates and marks, written after its pass by one writer per group, so
that a pass holds its group for its reads and decisions, not for the API server's answers.

In the platform's burst of issue 45 (one org group and 150 repo groups, 300 jobs at once) the
API server, busy with 300 runner Pods beside the Job controller, took 0.3 to 3 s to answer
one create or one annotation; a pass that awaited them held its group that long, and one
pass in six of the burst did (reconcile p99 2.2 to 3.4 s, p50 3 ms). Now the pass decides,
reserves the names of the runner Jobs it creates (expected from then on, so every later pass
counts them: reconcile/expectations.py) and hands the writes to the group's writer; the writer
sends the creates (in the create step's batches, kube/ratelimit.py's urgent turns), then
the marks, and records each kind's time in ``runner_writes_duration_seconds``.

One order per group at a time: while one is being written, a pass of the group creates
and marks nothing (it still plans, reports and hands its reaps), and the writer gives the
group back to the work queue when it is done, so that pass's wishes are looked at again
with the answers in. A refused create backs creation off as before (the create step), and
the group is given back to report it. A create or mark that failed otherwise gives the
group back with back-off, as a failed pass did; the retry pass decides again from the
cache and the names still expected, so no runner is created twice and none forgotten. A
restart forgets the order: what was created is listed, what was not is decided again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from gitea_runner_operator.kit import fence
from gitea_runner_operator.kit.priority import PICKUPS
from gitea_runner_operator.kit.tasks import STOP_GRACE, finish_or_cancel
from gitea_runner_operator.metrics import Metrics
from gitea_runner_operator.reconcile import forgejo
from gitea_runner_operator.reconcile.inputs import GroupPass
from gitea_runner_operator.reconcile.ports import ClusterWrites, Requeue
from gitea_runner_operator.reconcile.scaling import Plan
from gitea_runner_operator.reconcile.state import GroupState
from gitea_runner_operator.reconcile.steps.create import Creator
from gitea_runner_operator.reconcile.steps.marks import mark, wanted

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Order:
    """What one pass decided to write to its runners: the Jobs it reserved, and its marks."""

    p: GroupPass
    decision: Plan
    state: GroupState
    on_forgejo: bool
    names: tuple[str, ...]
    marks: bool


@dataclass(frozen=True, slots=True)
class Written:
    """What a pass may count of its writes: the runner Jobs created or being created, and
    whether marks are left for a pass that should come at once."""

    created: int = 0
    marks_left: bool = False


class RunnerWrites:
    """The create and marks steps of a pass, carried out by the group's writer (``queue``
    given: the controller's) or awaited by the pass itself (none: tests of the steps)."""

    def __init__(
        self,
        creator: Creator,
        cluster: ClusterWrites,
        metrics: Metrics,
        queue: Requeue | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._creator = creator
        self._cluster = cluster
        self._metrics = metrics
        self._queue = queue
        self._clock = clock
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._asked: set[str] = set()  # groups with a pass that had writes while one was busy

    async def carry_out(
        self, p: GroupPass, decision: Plan, state: GroupState, creates: int
    ) -> Written:
        """Create ``creates`` runner Jobs and write the pass's marks, or hand them over."""
        on_forgejo = forgejo.is_forgejo(p.snapshot)
        if self._queue is None:
            created = 0
            if creates > 0:
                created = await self._creator.create(p, decision, state, on_forgejo)
            return Written(created, await mark(self._cluster, p, decision))
        marks = bool(wanted(p, decision))
        if creates <= 0 and not marks:
            return Written()
        if p.key in self._tasks:
            self._asked.add(p.key)  # given back when the order under way is written
            return Written()
        order = Order(p, decision, state, on_forgejo, self._creator.reserve(p, creates), marks)
        # A woken group's pickup goes on until its creates are answered (kit/priority.py).
        carried = PICKUPS.carry(p.key) if order.names else None
        task = asyncio.create_task(self._write(order, carried), name=f"runner-writes:{p.key}")
        self._tasks[p.key] = task
        return Written(len(order.names))

    async def _write(self, order: Order, carried: Callable[[], None] | None = None) -> None:
        key = order.p.key
        again = False
        try:
            if order.names:
                started = self._clock()
                try:
                    created = await self._creator.create(
                        order.p, order.decision, order.state, order.on_forgejo, order.names
                    )
                finally:
                    if carried is not None:
                        carried()
                self._metrics.runner_writes_done("create", self._clock() - started)
                again = created < len(order.names)  # refused: the next pass reports it
            if order.marks:
                started = self._clock()
                await mark(self._cluster, order.p, order.decision, every=True)
                self._metrics.runner_writes_done("mark", self._clock() - started)
        except asyncio.CancelledError:
            raise
        except fence.Fenced:
            # --sharding: the domain moved on; its new owner decides from the cluster.
            log.info("runner writes cut: the group's domain is no longer held", group=key)
            self._done(key)
            return
        except Exception as exc:
            log.warning(
                "runner writes failed, will retry",
                group=key,
                error=f"{type(exc).__name__}: {exc}",
            )
            self._done(key)
            assert self._queue is not None
            self._queue.add_rate_limited(key)
            return
        if self._done(key) or again:
            assert self._queue is not None
            self._queue.add(key)

    def _done(self, key: str) -> bool:
        """The group's writer is done; whether a pass asked for writes meanwhile."""
        if self._tasks.get(key) is asyncio.current_task():
            del self._tasks[key]
        asked = key in self._asked
        self._asked.discard(key)
        return asked

    def forget(self, key: str) -> None:
        """The group is gone or handed over: its writes under way are cancelled (a create
        the API server took is listed by the next owner; one it did not is decided again)."""
        self._asked.discard(key)
        task = self._tasks.pop(key, None)
        if task is not None:
            task.cancel()

    def knows(self, key: str) -> bool:
        return key in self._tasks or key in self._asked

    async def finish(self, keys: frozenset[str], grace: float = STOP_GRACE) -> None:
        """Wait for the writes under way of ``keys``, which this replica hands over
        (``--sharding``): their right is withdrawn first, so what has not left is cut at its
        next write (kit/fence.py), but a create already sent is answered before the next owner
        is told to list the group's Jobs, or it could decide without it and create again.
        Cancelled only past ``grace``, as a pass under way would be."""
        await finish_or_cancel([t for k, t in self._tasks.items() if k in keys], grace)

    async def close(self, grace: float = STOP_GRACE) -> None:
        """Let the writes under way finish (at most ``grace`` seconds), then cancel the rest."""
        await finish_or_cancel(self._tasks.values(), grace)
        self._tasks.clear()
        self._asked.clear()
