"""The poll task's Gitea steps after an observation: reap, register (Forgejo), follow up lost
runners, keep the hook.

Each is a :class:`GiteaStep`: whether it has work in this turn, the work, and what a timeout
means for it. The task's loop (poll/poller.py) runs them in order, each under one deadline
(``Pacing.step_deadline``) and one error policy (poll/task_faults.py: a failure is a
rate-limited log line and the next step still runs): a step does not carry its own timeout or
its own ``try``. A step that changed what the reconcile reads (the hook's status) says so,
and the loop queues the group.

The steps are shared by every group's task; what one group's hook step must remember between
turns is the task's :class:`HookState`, handed in with the turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gitea_runner_operator.api.hooks import HookStatus
from gitea_runner_operator.api.observation import Snapshot
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.forge.observe import GiteaHandle
from gitea_runner_operator.poll.enroll import Enroller
from gitea_runner_operator.poll.hooks import HookKeeper
from gitea_runner_operator.poll.reaper import Reaper
from gitea_runner_operator.poll.rerun import LossFollowUp
from gitea_runner_operator.reconcile.forgejo import NO_JOB_EVENTS
from gitea_runner_operator.reconcile.ports import ReapOrder


@dataclass(slots=True)
class HookState:
    """What a group's task knows of its own hook, across turns (and across a restart of the
    task for a new spec)."""

    hook: HookStatus | None = None  # the last outcome of keeping it (None: not tried)
    removed: bool = False
    # Set by the first teardown order and never cleared: a deleting group's hook is only
    # ever removed, never created or kept again.
    deleting: bool = False


@dataclass(frozen=True, slots=True)
class Turn:
    """One good observation and what the steps after it act on."""

    key: str
    spec: RunnerGroupSpec
    handle: GiteaHandle
    snapshot: Snapshot
    order: ReapOrder | None
    hooks: HookState


class GiteaStep(Protocol):
    @property
    def what(self) -> str:
        """Names the step in its failure line."""
        ...

    def wanted(self, turn: Turn) -> bool:
        """Whether the step has work in this turn."""
        ...

    async def run(self, turn: Turn) -> bool:
        """The work; True when the reconcile must hear of what changed."""
        ...

    def timed_out(self, turn: Turn, deadline: float) -> bool:
        """What running out of time means for the step; True as for :meth:`run`."""
        ...


class _TimeoutIsALogLine:
    """A step for which running out of time changes nothing the reconcile reads: the loop's
    log line says it all."""

    __slots__ = ()

    def timed_out(self, turn: Turn, deadline: float) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class ReapStep(_TimeoutIsALogLine):
    """Carry out the reaps the reconciler proposed (poll/reaper.py)."""

    reaper: Reaper
    what: str = "reaping"

    def wanted(self, turn: Turn) -> bool:
        return turn.order is not None

    async def run(self, turn: Turn) -> bool:
        assert turn.order is not None
        await self.reaper.run(turn.key, turn.handle, turn.snapshot, turn.order)
        return False


@dataclass(frozen=True, slots=True)
class EnrollStep(_TimeoutIsALogLine):
    """Forgejo: register the runners of the group's suspended runner Jobs."""

    enroller: Enroller
    what: str = "registering runners"

    def wanted(self, turn: Turn) -> bool:
        return turn.snapshot.problem is None and turn.handle.forgejo is not None

    async def run(self, turn: Turn) -> bool:
        await self.enroller.run(turn.key, turn.handle, turn.snapshot, turn.spec)
        return False


@dataclass(frozen=True, slots=True)
class LossStep(_TimeoutIsALogLine):
    """Lost runners: find their jobs, re-run them (poll/rerun.py)."""

    losses: LossFollowUp
    what: str = "following up lost runners"

    def wanted(self, turn: Turn) -> bool:
        return turn.snapshot.problem is None

    async def run(self, turn: Turn) -> bool:
        await self.losses.run(turn.key, turn.spec, turn.handle, turn.snapshot)
        return False


@dataclass(frozen=True, slots=True)
class HookStep:
    """Keep, or remove, the group's own hook in Gitea; last, after the reconcile was told
    about the observation, so a slow hook call never delays a runner."""

    hooks: HookKeeper | None
    what: str = "keeping the webhook"

    def wanted(self, turn: Turn) -> bool:
        return turn.snapshot.problem is None

    def removing(self, turn: Turn) -> bool:
        order, state = turn.order, turn.hooks
        held = self.hooks is not None and self.hooks.holds(turn.key)
        return (order is not None and order.remove_hook) or (
            state.deleting and (turn.spec.manages_hook or held)
        )

    def kept_id(self, key: str) -> int | None:
        return self.hooks.kept_id(key) if self.hooks is not None else None

    async def run(self, turn: Turn) -> bool:
        state, spec = turn.hooks, turn.spec
        if turn.handle.forgejo is not None:
            # No workflow_job event in Forgejo: never a hook there, so none to remove.
            if turn.order is not None and turn.order.remove_hook and not state.removed:
                state.removed = True
                return True
            if spec.manages_hook and state.hook != NO_JOB_EVENTS:
                state.hook = NO_JOB_EVENTS
                return True
            return False
        if self.hooks is None:
            return False
        removing = self.removing(turn)
        if state.deleting and not removing:
            return False  # never create or keep a hook for a group being deleted
        if removing:
            if state.removed:
                return False
            state.removed = await self.hooks.remove(turn.key, turn.handle)
            return state.removed
        if spec.manages_hook:
            status = await self.hooks.keep(turn.key, spec, turn.handle)
            if status is not None and status != state.hook:
                state.hook = status
                return True
        elif self.hooks.holds(turn.key):
            await self.hooks.remove(turn.key, turn.handle)  # manageHook was turned off
        return False

    def timed_out(self, turn: Turn, deadline: float) -> bool:
        if not turn.spec.manages_hook or self.removing(turn):
            return False
        turn.hooks.hook = HookStatus(
            False, "HookFailed", f"Gitea did not answer within {deadline:.0f}s"
        )
        return True


def gitea_steps(
    reaper: Reaper | None = None,
    enroller: Enroller | None = None,
    losses: LossFollowUp | None = None,
    hooks: HookKeeper | None = None,
) -> tuple[GiteaStep, ...]:
    """The steps of every group's task, in the order they run. The hook step is always
    there: a Forgejo group's status says it has no hook even without a keeper."""
    steps: list[GiteaStep] = []
    if reaper is not None:
        steps.append(ReapStep(reaper))
    if enroller is not None:
        steps.append(EnrollStep(enroller))
    if losses is not None:
        steps.append(LossStep(losses))
    steps.append(HookStep(hooks))
    return tuple(steps)
