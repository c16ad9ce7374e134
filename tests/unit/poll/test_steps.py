"""The poll task's Gitea steps share one protocol, one deadline and one error policy
(poll/steps.py): a step that fails or runs out of time costs its own step only, is one log
line, and the hook step's timeout is the group's ``HookFailed`` status."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from structlog.testing import capture_logs

from gitea_runner_operator.api.observation import Observation, Snapshot
from gitea_runner_operator.api.runnergroup import parse_spec
from gitea_runner_operator.poll.pacing import Pacing
from gitea_runner_operator.poll.poller import GroupPoller
from gitea_runner_operator.poll.steps import HookStep, Turn
from tests.support.builders import VALID

GOOD = Snapshot(0.0, "x", observation=Observation(queued=(), runners=()))


@dataclass
class Step:
    what: str
    fails: bool = False
    hangs: bool = False
    ran: list[str] = field(default_factory=list)

    def wanted(self, turn: Turn) -> bool:
        return True

    async def run(self, turn: Turn) -> bool:
        self.ran.append(self.what)
        if self.hangs:
            await asyncio.sleep(60)
        if self.fails:
            raise RuntimeError("a Gitea answer nobody foresaw")
        return False

    def timed_out(self, turn: Turn, deadline: float) -> bool:
        return False


def _poller(steps: Any, spec: Any = None, notified: list[str] | None = None) -> GroupPoller:
    async def observe(namespace: str, spec: Any, newer_than: float) -> Any:
        return GOOD, object()  # a good answer and a handle

    said = notified if notified is not None else []
    return GroupPoller(
        "team-a/ci",
        spec or parse_spec({**VALID, "pollInterval": "600s"}),
        observe,
        said.append,
        steps,
        pacing=Pacing(min_refresh=0.0, step_deadline=0.05),
    )


async def _one_turn(poller: GroupPoller) -> None:
    poller.start()
    try:
        await asyncio.sleep(0.3)
    finally:
        await poller.stop()


async def test_a_failing_or_hanging_step_costs_its_own_step_only():
    ran: list[str] = []
    steps = [
        Step("reaping", fails=True, ran=ran),
        Step("registering runners", hangs=True, ran=ran),
        Step("following up lost runners", ran=ran),
    ]
    with capture_logs() as logs:
        await _one_turn(_poller(steps))
    assert ran == ["reaping", "registering runners", "following up lost runners"]
    errors = [e["event"] for e in logs if e["log_level"] == "error"]
    assert errors == ["reaping failed unexpectedly", "registering runners did not finish within 0s"]


async def test_a_hook_step_out_of_time_is_the_groups_hook_failed_status_and_a_reconcile():
    class SlowKeeper:
        def holds(self, key: str) -> bool:
            return False

        async def keep(self, key: str, spec: Any, handle: Any) -> Any:
            await asyncio.sleep(60)

    hook = {"secretRef": {"name": "h", "key": "k"}, "manageHook": True}
    spec = parse_spec({**VALID, "pollInterval": "600s", "webhook": hook})
    notified: list[str] = []
    handle = type("Handle", (), {"forgejo": None})()

    async def observe(namespace: str, spec: Any, newer_than: float) -> Any:
        return GOOD, handle

    poller = GroupPoller(
        "team-a/ci",
        spec,
        observe,
        notified.append,
        (HookStep(SlowKeeper()),),  # type: ignore[arg-type]
        pacing=Pacing(min_refresh=0.0, step_deadline=0.05),
    )
    with capture_logs():
        await _one_turn(poller)
    assert poller.hook is not None and poller.hook.reason == "HookFailed"
    assert len(notified) == 2  # the answer, then the hook's new status
