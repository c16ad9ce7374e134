"""One asyncio task per RunnerGroup: the only place that talks to that group's Gitea.

The task observes Gitea every ``pollInterval`` (or sooner when woken), publishes the snapshot
and enqueues the group; it then carries out the reaps the reconciler proposed. Reconciles
only read the latest snapshot and never wait for Gitea, so a slow or hanging Gitea URL
delays its own group and nobody else's.

When it asks again after a failure is poll/pacing.py's rule; how its own faults (an end, a
hang, an unexpected failure) are noticed and logged is poll/task_faults.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypedDict

import structlog

from gitea_runner_operator.api.cadence import Cadence
from gitea_runner_operator.api.hooks import HookStatus
from gitea_runner_operator.api.naming import GroupKey
from gitea_runner_operator.api.observation import ProblemKind, Snapshot
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.forge.observe import GiteaHandle
from gitea_runner_operator.kit import fence
from gitea_runner_operator.kit.backoff import jittered
from gitea_runner_operator.kit.lograte import LogRate
from gitea_runner_operator.kit.priority import PICKUPS
from gitea_runner_operator.kit.tasks import cancelled_itself
from gitea_runner_operator.kit.tenant_reads import ReadShares
from gitea_runner_operator.poll.deliveries import Deliveries
from gitea_runner_operator.poll.last_good import (
    LastGoodHandle,
    NamespaceDeletingFn,
    ObserveWithFn,
)
from gitea_runner_operator.poll.next_poll import NextPoll
from gitea_runner_operator.poll.pacing import Pacing, next_delay
from gitea_runner_operator.poll.steps import GiteaStep, HookState, HookStep, Turn
from gitea_runner_operator.poll.task_faults import WatchedTask, failure_log, log_failure, run_step
from gitea_runner_operator.poll.triggers import answer_key, lists_queued, new_queued
from gitea_runner_operator.reconcile.ports import ReapOrder

log = structlog.get_logger(__name__)

ObserveFn = Callable[..., Awaitable[tuple[Snapshot, GiteaHandle | None]]]
# A periodic poll may reuse an answer another group on the same scope got this recently.
SHARE_WINDOW = 5.0
# A quiet group's runner list is asked again at least this often (seconds), though no runner
# Job of it started or ended since: registrations left from before, or made by hand.
RUNNER_LIST_MAX_AGE = 1800.0
DEFAULT_PACING = Pacing()


class PollerOptions(TypedDict, total=False):
    """What every group's poller is started with, besides its key and spec: the pollers
    (Pollers) hand these on as they are, and GroupPoller's signature holds the defaults."""

    pacing: Pacing
    clock: Callable[[], float]
    every_answer: Callable[[str, float, bool], bool] | None
    failures: LogRate
    observe_with: ObserveWithFn | None
    namespace_deleting: NamespaceDeletingFn | None
    right: Callable[[str], bool] | None
    left: Callable[[str], float] | None
    on_cadence: Callable[[str, Cadence | None, Cadence], None] | None
    gitea_heard: Callable[[str], float | None] | None
    active: Callable[[str], bool] | None
    jobs_changed_at: Callable[[str], float] | None
    reads: ReadShares | None


class GroupPoller:
    def __init__(
        self,
        key: str,
        spec: RunnerGroupSpec,
        observe: ObserveFn,
        notify: Callable[[str], None],
        steps: Sequence[GiteaStep] = (),
        *,
        pacing: Pacing = DEFAULT_PACING,
        clock: Callable[[], float] = time.monotonic,
        every_answer: Callable[[str, float, bool], bool] | None = None,
        failures: LogRate | None = None,
        observe_with: ObserveWithFn | None = None,
        namespace_deleting: NamespaceDeletingFn | None = None,
        right: Callable[[str], bool] | None = None,
        left: Callable[[str], float] | None = None,
        on_cadence: Callable[[str, Cadence | None, Cadence], None] | None = None,
        gitea_heard: Callable[[str], float | None] | None = None,
        active: Callable[[str], bool] | None = None,
        jobs_changed_at: Callable[[str], float] | None = None,
        reads: ReadShares | None = None,
    ) -> None:
        self.key, self.spec = key, spec
        self._namespace = GroupKey.parse(key).namespace
        self._observe, self._notify, self._steps = observe, notify, tuple(steps)
        self._pacing, self._clock = pacing, clock
        self.last_good = LastGoodHandle(key, observe_with, namespace_deleting, clock=clock)
        # --sharding: whether this replica still holds the group's domain, asked by every
        # write of the task just before it leaves (kit/fence.py).
        self._right = right
        self._left = left  # and how long that right has left at most (kit/fence.bounded)
        # One line per unexpected failure, at a rate shared by every group's poller.
        self._failed: Callable[[str, BaseException], None] = functools.partial(
            log_failure, failures if failures is not None else failure_log(), key
        )
        # Whether an unchanged answer must still reach the reconcile (Ledger.must_weigh).
        self._every_answer = every_answer
        self._handed: tuple[object, ...] | None = None  # answer_key of the last one handed
        self._handed_at = float("-inf")
        self.notified = 0  # answers handed to the reconcile, for tests and benchmarks
        self.latest: Snapshot | None = None
        self.hooks = HookState()
        # The webhook evidence the poll's interval follows (poll/deliveries.py), the interval
        # in force with its reason (None before the first poll), and who hears of a change.
        self.deliveries = Deliveries(clock)
        self.cadence: Cadence | None = None
        self._on_cadence = on_cadence
        self._gitea_heard = gitea_heard  # the latest delivery for any group of a Gitea URL
        self._active = active
        # When a runner Job of the group last stopped holding a slot (the cache's clock):
        # with ``active``, what says whether the runner list can have changed (runners_since).
        self._jobs_changed_at = jobs_changed_at
        self._last_start = float("-inf")  # when the latest observation started
        self._order: ReapOrder | None = None
        self._task = WatchedTask(clock)  # seen ended or hung, ``Pollers.ensure`` restarts it
        # When the next observation starts: the interval, wake-ups, the namespace's share of
        # the Gitea read rate (kit/tenant_reads.py).
        self._next = NextPoll(key, clock, pacing.min_refresh, reads, self._task.expect_within)
        self.observations = 0
        self.asking = False  # an observation is in flight

    @property
    def _until(self) -> float:
        """When the current sleep ends (the cadence tests read how long a poll sleeps)."""
        return self._next.until

    @property
    def hook(self) -> HookStatus | None:
        return self.hooks.hook

    @property
    def hook_removed(self) -> bool:
        return self.hooks.removed

    @property
    def deleting(self) -> bool:
        return self.hooks.deleting

    def wake(self, *, paced: bool = False) -> None:
        """Ask for a fresh observation soon, without waiting for it. Coalesced: any number of
        wake-ups before the next observation cause exactly one. Ignored while Gitea itself is
        failing (its backoff rules), so events cannot turn into a flood of requests.
        ``paced``: the caller holds the group to a rate already (the webhook's WakeLimiter),
        so ``min_refresh`` does not hold this observation back a second time."""
        latest = self.latest
        if latest is not None and latest.problem is not None and latest.problem.kind.backs_off:
            return
        self._next.wake(paced=paced)

    def heard(self, job_id: int | None = None) -> None:
        """A verified webhook delivery for the group's scope arrived (``job_id``: the queued
        job it announces): evidence its deliveries arrive (poll/deliveries.py)."""
        self.deliveries.heard(job_id)

    def active(self) -> bool:
        """Whether the group has runner Jobs alive, as the controller's cache says."""
        return self._active is not None and self._active(self.key)

    def shrink(self) -> None:
        """End a stretched sleep no later than ``spec.pollInterval`` after the last
        observation started: a runner Job started, or the evidence was reset."""
        self._next.shrink(self._last_start + self.spec.poll_interval_seconds)

    def handed_over(self) -> None:
        """This replica took the group over: its deliveries are unproven here, so the poll
        runs at ``spec.pollInterval`` until one arrives. The entry point of a hand-over;
        a poller created for a group that was taken starts this way too."""
        self.deliveries.handed_over()
        self.shrink()

    @property
    def kept_hook_id(self) -> int | None:
        hooks = next((s for s in self._steps if isinstance(s, HookStep)), None)
        return hooks.kept_id(self.key) if hooks is not None else None

    def submit(self, order: ReapOrder) -> None:
        """Reaps to carry out after the next observation (replacing any not yet started;
        each order is a full plan). An order that removes the hook is kept even with no
        runner to reap: dropping it wedged the teardown of a group without runners."""
        if order.deleting:
            self.hooks.deleting = True
        wanted = order.candidates or order.orphans or order.remove_hook
        self._order = order if wanted else None

    def start(self, after: float = 0.0) -> None:
        """Start the task; its first poll waits ``after`` seconds (Pollers spreads a burst
        of new tasks) unless a wake-up comes first."""
        right, left, key = self._right, self._left, self.key
        self._task.start(
            self._loop(after),
            name=f"poll:{key}",
            within=after,
            context=fence.context(
                None if right is None else lambda: right(key),
                None if left is None else lambda: left(key),
            ),
        )

    @property
    def running(self) -> bool:
        """Started and not ended (a stopped poller is not running either)."""
        return self._task.running

    @property
    def hung(self) -> bool:
        """Past the time by which the current step or sleep must have ended: every await of
        the loop has a deadline, so only a fault makes this true."""
        return self._task.hung

    @property
    def ended(self) -> str:
        """How the task ended, for the log line that restarts it."""
        return self._task.ended

    async def stop(self) -> None:
        """Cancel the task and wait for it. A task that had already ended with an error
        does not raise it here (``ensure`` logs it): stopping a group must not fail for it."""
        await self._task.stop()

    async def _loop(self, after: float = 0.0) -> None:
        await self._next.first(after)
        failures = 0
        while True:
            asked, asked_at = self._next.begin()
            started = self._last_start = self._clock()
            snapshot: Snapshot | None = None
            handle: GiteaHandle | None = None
            interval = self.spec.poll_interval_seconds
            newer_than = max(self._next.wanted_after, started - min(interval / 2, SHARE_WINDOW))
            self._task.expect_within(self._pacing.observe_deadline)
            self.asking = True  # a webhook delivery now waits for this answer (WakeLimiter)
            held = self._next.hold(asked)
            try:
                since = self._runners_since(started)
                # A woken group's observation is a pickup's: it never makes way.
                with PICKUPS.urgent() if asked else contextlib.nullcontext():
                    if since is None:
                        found = await self._observe(self._namespace, self.spec, newer_than)
                    else:
                        found = await self._observe(self._namespace, self.spec, newer_than, since)
                snapshot, handle = await self.last_good.after(self.spec, self.deleting, *found)
            except asyncio.CancelledError as exc:
                if cancelled_itself():
                    raise
                # A shared request this poll waited for was cancelled under it (its URL
                # forgotten, its other waiters gone): a failed observation, not the end of
                # the group's only Gitea task.
                self._failed("poll observation cancelled under it; polling on", exc)
            except Exception as exc:
                self._failed("poll failed unexpectedly", exc)
            finally:
                self._next.release(held)  # its fetch was charged instead
            self.asking = False
            self.observations += 1
            if self.observations == 1:  # a hand-over's trail (docs/benchmarks.md)
                log.debug("first poll", group=self.key, queued=new_queued(None, snapshot))
            if asked:  # the wake-up path's spans (tests/benchmarks/webhook_latency.py)
                log.debug(
                    "observed after a wake-up",
                    group=self.key,
                    waited=round(started - asked_at, 4),
                    took=round(self._clock() - started, 4),
                    new_queued=new_queued(self.latest, snapshot),
                )
            kind = None
            if snapshot is None or snapshot.problem is not None:
                failures += 1
                kind = snapshot.problem.kind if snapshot and snapshot.problem else ProblemKind.GITEA
            else:
                failures = 0
            before, offered = self.latest, self.spec.label_names
            if snapshot is not None:
                self.latest = snapshot
                if failures == 0:  # a queued job of ours that no delivery announced?
                    self.deliveries.judge(before, snapshot, offered)
            # Before the hand-over, so that the pass it queues shows the interval in force.
            shifted = self._follow_evidence() is not None
            self._hand_over(snapshot, asked or shifted)
            order, self._order = self._order, None
            if order is not None and handle is None and self._order is None:
                self._order = order  # Gitea could not be asked: keep it for the next pass
            if handle is not None and snapshot is not None and fence.holds():
                turn = Turn(self.key, self.spec, handle, snapshot, order, self.hooks)
                await self._steps_after(turn)
            retry_after = snapshot.retry_after if snapshot else None
            if self._follow_evidence() is not None:  # the hook step's outcome changed it
                self._notify(self.key)
            pacing, base = self._pacing, self.spec.poll_interval_seconds
            assert self.cadence is not None
            interval = self.cadence.delay(self._clock(), base)
            if failures:
                interval = base  # a failing Gitea's backoff rules
            delay = next_delay(
                interval, failures, retry_after, kind, pacing.backoff_max, pacing.secret_retry
            )
            delay = jittered(delay, 0.95, 1.05)
            self._task.expect_within(max(delay, pacing.min_refresh))
            await self._next.sleep(started, delay)

    def _runners_since(self, now: float) -> float | None:
        """After when a runner list must have been asked for this observation: None (one as
        new as the observation, as always) while a runner Job of the group is alive or being
        created, a reap is due, the group is being deleted, or nothing was listed yet; else
        the last time a runner Job stopped holding a slot, or ``RUNNER_LIST_MAX_AGE`` ago. A
        quiet group's poll then asks Gitea one request (the queued jobs), not two."""
        changed_at = self._jobs_changed_at
        if (
            changed_at is None
            or self.latest is None
            or self._order is not None
            or self.deleting  # its teardown removes every registration it can list
            or self.active()
        ):
            return None
        return max(changed_at(self.key), now - RUNNER_LIST_MAX_AGE)

    def _follow_evidence(self) -> Cadence | None:
        """Decide the interval until the next poll and why (api/cadence.py), kept as
        ``cadence``; a change (not the first decision) is told to the metrics and returned,
        for the caller to queue the group, whose status shows it."""
        hook = self.hooks.hook
        cadence = self.deliveries.cadence(
            self.spec,
            self._pacing.max_webhook_poll,
            hook.ok if hook is not None else None,
            self.active() or self._order is not None,
            self._gitea_heard(self.spec.gitea.url) if self._gitea_heard is not None else None,
        )
        before, self.cadence = self.cadence, cadence  # the newest window end, always
        if cadence == before:
            return None
        if self._on_cadence is not None:
            self._on_cadence(self.key, before, cadence)
        return cadence if before is not None else None

    def _hand_over(self, snapshot: Snapshot | None, asked: bool) -> None:
        """Queue the group's reconcile when this answer may change a decision: it differs
        from the last one handed over, someone asked for it, the resync is due, or peers
        weigh it by its age while their family has queued jobs (Ledger.must_weigh)."""
        key = answer_key(snapshot) if snapshot is not None else None
        now, every = self._clock(), self._every_answer
        if (
            snapshot is None
            or asked
            or key != self._handed
            or now - self._handed_at >= self._pacing.resync
            or (every is not None and every(self.key, snapshot.started_at, lists_queued(snapshot)))
        ):
            self._handed, self._handed_at = key, now
            self.notified += 1
            self._notify(self.key)

    async def _steps_after(self, turn: Turn) -> None:
        """The Gitea steps after a good observation (poll/steps.py), in order, each under
        the step deadline; a failure costs its own step only. (Not while another replica
        acts for the group: then no write step runs at all.)"""
        deadline = self._pacing.step_deadline
        for step in self._steps:
            if not step.wanted(turn):
                continue
            self._task.expect_within(deadline)
            if await run_step(step, turn, deadline, self._failed):
                self._notify(self.key)
