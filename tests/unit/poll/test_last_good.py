"""A namespace deleted whole takes the group's tokens Secret and RoleBinding along with the
group: its poll task still removes the runners' registrations, asking Gitea with the handle of
its last good answer. A group that is not being deleted never does (a revoked Secret stops it).

Before: the deleting group's observations failed with ``SecretForbidden`` once the token left
the Secret store's cache, no reap ran, and the teardown gave up after drainTimeout + 30 s
leaving the registrations in Gitea (tests/gitops/test_gitops_namespace_prune.py on the testbed).
"""

from __future__ import annotations

import asyncio
from typing import Any

from gitea_runner_operator.api.observation import Observation, Problem, ProblemKind, Snapshot
from gitea_runner_operator.api.runnergroup import parse_spec
from gitea_runner_operator.poll.last_good import LastGoodHandle
from gitea_runner_operator.poll.pacing import Pacing
from gitea_runner_operator.poll.poller import GroupPoller
from gitea_runner_operator.poll.steps import ReapStep
from gitea_runner_operator.reconcile.ports import ReapOrder
from tests.support.builders import VALID

GROUP = {"metadata": {"name": "ci", "namespace": "team-a", "uid": "u1"}}
GOOD = Snapshot(0.0, "x", observation=Observation(queued=(), runners=()))


def _gone(reason: str = "SecretForbidden") -> Snapshot:
    return Snapshot(0.0, "x", problem=Problem(reason, "gone", ProblemKind.SECRET))


class Reaper:
    def __init__(self) -> None:
        self.handles: list[object] = []

    async def run(self, key: str, handle: object, snapshot: Snapshot, order: ReapOrder) -> None:
        self.handles.append(handle)


def _poller(reaper: Reaper, asked_again: list[object]) -> GroupPoller:
    """A group whose first answer is good (handle ``first``) and whose Secret then goes."""
    seen = 0

    async def observe(namespace: str, spec: Any, newer_than: float) -> Any:
        nonlocal seen
        seen += 1
        return (GOOD, "first") if seen == 1 else (_gone(), None)

    async def observe_with(spec: Any, handle: object) -> Any:
        asked_again.append(handle)
        return GOOD, "again"

    return GroupPoller(
        "team-a/ci",
        parse_spec(VALID),
        observe,
        lambda key: None,
        (ReapStep(reaper),),  # type: ignore[arg-type]
        pacing=Pacing(min_refresh=0.01, secret_retry=0.01),
        observe_with=observe_with,
    )


async def _rounds(poller: GroupPoller, order: ReapOrder, rounds: int = 3) -> None:
    poller.start()
    try:
        await asyncio.sleep(0.05)  # the first, good answer
        assert poller.last_good.handle == "first"
        poller.submit(order)
        for _ in range(rounds):
            poller.wake()
            await asyncio.sleep(0.05)
    finally:
        await poller.stop()


async def test_a_deleting_group_whose_secret_is_gone_reaps_with_its_last_good_handle():
    reaper, asked_again = Reaper(), []
    poller = _poller(reaper, asked_again)
    await _rounds(poller, ReapOrder(GROUP, remove_hook=True, deleting=True))
    assert asked_again[0] == "first"  # the token of the last good answer, then its own
    assert set(asked_again) <= {"first", "again"}
    assert reaper.handles and set(reaper.handles) == {"again"}


async def test_a_group_not_being_deleted_never_asks_with_a_token_nobody_lends_any_more():
    reaper, asked_again = Reaper(), []
    poller = _poller(reaper, asked_again)
    await _rounds(poller, ReapOrder(GROUP, remove_hook=True, deleting=False))
    assert asked_again == []
    assert reaper.handles == []
    assert poller.latest is not None and poller.latest.problem is not None


async def test_only_credentials_gone_for_good_ask_again():
    asked: list[object] = []

    async def again(spec: Any, handle: object) -> Any:
        asked.append(handle)
        return GOOD, "again"

    last = LastGoodHandle("team-a/ci", again)  # type: ignore[arg-type]
    spec = parse_spec(VALID)
    assert await last.after(spec, True, GOOD, "first") == (GOOD, "first")  # type: ignore[arg-type]
    unreachable = Snapshot(0.0, "x", problem=Problem("GiteaUnreachable", "no answer"))
    assert await last.after(spec, True, unreachable, None) == (unreachable, None)
    assert asked == []  # Gitea's own silence is not a reason to reuse a token
    for reason in ("SecretNotFound", "SecretKeyMissing", "SecretForbidden", "SecretNotAllowed"):
        assert await last.after(spec, True, _gone(reason), None) == (GOOD, "again")
    assert asked == ["first", "again", "again", "again"]
