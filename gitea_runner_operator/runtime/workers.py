"""The reconcile workers: ``--workers`` tasks that take group keys off the work queue and run
one reconcile pass each.

The queue never hands one key to two workers, so a group's passes never overlap. A worker
acts on a group only while this replica serves it (``--sharding``), and every write of the
pass asks again (kit/fence.py): a pass cut because the domain moved is dropped, not
retried, since the group's new replica reconciles it. A pass that failed is retried with the
queue's per-key back-off; one that wants another look later is queued for then. Which groups
have a pass under way is known here, so that a hand-over can wait for them to end.
"""

from __future__ import annotations

import asyncio
import functools
import time

import structlog

from gitea_runner_operator.kit import fence
from gitea_runner_operator.kit.priority import PICKUPS
from gitea_runner_operator.metrics import Metrics
from gitea_runner_operator.reconcile.reconciler import Reconciler
from gitea_runner_operator.runtime.workqueue import ShutDown, WorkQueue
from gitea_runner_operator.sharding.leases.share import Share

log = structlog.get_logger(__name__)


class ReconcileWorkers:
    """``share``: this replica's share of the groups under ``--sharding``, None without it
    (every group is served here)."""

    def __init__(
        self,
        queue: WorkQueue[str],
        reconciler: Reconciler,
        metrics: Metrics,
        share: Share | None = None,
    ) -> None:
        self._queue, self._reconciler = queue, reconciler
        self._metrics, self._share = metrics, share
        self._running: set[str] = set()  # groups a worker reconciles now
        self._finished = asyncio.Event()  # set whenever a worker finishes a reconcile

    def start(self, count: int) -> list[asyncio.Task[None]]:
        return [asyncio.create_task(self.work(), name=f"worker:{i}") for i in range(count)]

    async def finish(self, keys: frozenset[str]) -> None:
        """Return once no pass of ``keys`` is under way."""
        while self._running & keys:
            self._finished.clear()
            await self._finished.wait()

    async def work(self) -> None:
        """One worker, until the queue shuts down."""
        queue, share = self._queue, self._share
        while True:
            try:
                key = await queue.get()
            except ShutDown:
                return
            if share is not None and not share.serves(key):
                queue.forget(key)  # another replica's group
                queue.done(key)
                continue
            started = time.monotonic()
            self._running.add(key)
            right = None if share is None else functools.partial(share.serves, key)
            until = None if share is None else functools.partial(share.left, key)
            try:
                with fence.fenced_by(right, until):  # each write of the pass asks again
                    result = await self._reconciler.reconcile(key)
            except fence.Fenced:
                self._metrics.reconcile_done(time.monotonic() - started, error=False)
                log.info("pass cut: the group's domain is no longer held", group=key)
                queue.forget(key)
            except Exception as exc:
                self._metrics.reconcile_done(time.monotonic() - started, error=True)
                retries = queue.limiter.retries(key)
                log.warning(
                    "reconcile failed, will retry",
                    group=key,
                    error=f"{type(exc).__name__}: {exc}",
                    retries=retries,
                )
                log.debug("reconcile failure detail", group=key, exc_info=True)
                queue.add_rate_limited(key)
            else:
                took = time.monotonic() - started
                self._metrics.reconcile_done(took, error=False)
                log.debug("reconciled", group=key, took=round(took, 4))
                queue.forget(key)
                if result.requeue_after is not None:
                    queue.add_after(key, result.requeue_after)
            finally:
                PICKUPS.passed(key, started)  # a woken group's pickup has ended
                self._running.discard(key)
                self._finished.set()
                queue.done(key)
