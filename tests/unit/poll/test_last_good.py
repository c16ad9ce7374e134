"""A namespace deleted whole takes the group's tokens Secret and RoleBinding along with the
group: its poll task still removes the runners' registrations, asking Gitea with the handle of
its last good answer. A group that is not being deleted never does (a revoked Secret stops it),
and neither does a deleting group whose namespace stays (its owner revoked the token), one
whose scope was edited after, or one past LAST_GOOD_GRACE (issue 45).

Before: the deleting group's observations failed with ``SecretForbidden`` once the token left
the Secret store's cache, no reap ran, and the teardown gave up after drainTimeout + 30 s
leaving the registrations in Gitea (tests/gitops/test_gitops_namespace_prune.py on the testbed).
"""

from __future__ import annotations

import asyncio
from typing import Any

from gitea_runner_operator.api.observation import Observation, Problem, ProblemKind, Snapshot
from gitea_runner_operator.api.runnergroup import parse_spec
from gitea_runner_operator.poll.last_good import LAST_GOOD_GRACE, LastGoodHandle
from gitea_runner_operator.poll.pacing import Pacing
from gitea_runner_operator.poll.poller import GroupPoller
from gitea_runner_operator.poll.steps import ReapStep
from gitea_runner_operator.reconcile.ports import ReapOrder
from tests.support.builders import VALID
from tests.support.fake_cluster import Clock

GROUP = {"metadata": {"name": "ci", "namespace": "team-a", "uid": "u1"}}
GOOD = Snapshot(0.0, "x", observation=Observation(queued=(), runners=()))


def _gone(reason: str = "SecretForbidden") -> Snapshot:
    return Snapshot(0.0, "x", problem=Problem(reason, "gone", ProblemKind.SECRET))


class Reaper:
    def __init__(self) -> None:
        self.handles: list[object] = []

    async def run(self, key: str, handle: object, snapshot: Snapshot, order: ReapOrder) -> None:
        self.handles.append(handle)


# The namespace each ask again was charged to (kit/fair_gate.py, forge/budget.py).
charged_to: list[str] = []


async def _namespace_deleted(namespace: str) -> bool:
    return True


async def _namespace_stays(namespace: str) -> bool:
    return False


def _poller(
    reaper: Reaper, asked_again: list[object], namespace_deleting: Any = _namespace_deleted
) -> GroupPoller:
    """A group whose first answer is good (handle ``first``) and whose Secret then goes."""
    seen = 0
    charged_to.clear()

    async def observe(namespace: str, spec: Any, newer_than: float) -> Any:
        nonlocal seen
        seen += 1
        return (GOOD, "first") if seen == 1 else (_gone(), None)

    async def observe_with(spec: Any, handle: object, namespace: str) -> Any:
        asked_again.append(handle)
        charged_to.append(namespace)
        return GOOD, "again"

    return GroupPoller(
        "team-a/ci",
        parse_spec(VALID),
        observe,
        lambda key: None,
        (ReapStep(reaper),),  # type: ignore[arg-type]
        pacing=Pacing(min_refresh=0.01, secret_retry=0.01),
        observe_with=observe_with,
        namespace_deleting=namespace_deleting,
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
    # Its requests take its own namespace's places and budget share, not a shared one.
    assert set(charged_to) == {"team-a"}
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

    async def again(spec: Any, handle: object, namespace: str) -> Any:
        asked.append(handle)
        return GOOD, "again"

    last = LastGoodHandle("team-a/ci", again, _namespace_deleted)  # type: ignore[arg-type]
    spec = parse_spec(VALID)
    assert await last.after(spec, True, GOOD, "first") == (GOOD, "first")  # type: ignore[arg-type]
    unreachable = Snapshot(0.0, "x", problem=Problem("GiteaUnreachable", "no answer"))
    assert await last.after(spec, True, unreachable, None) == (unreachable, None)
    assert asked == []  # Gitea's own silence is not a reason to reuse a token
    for reason in ("SecretNotFound", "SecretKeyMissing", "SecretForbidden", "SecretNotAllowed"):
        assert await last.after(spec, True, _gone(reason), None) == (GOOD, "again")
    # Always the handle of the last good answer itself: what it asks with does not renew
    # the handle, nor its grace.
    assert asked == ["first"] * 4


async def test_a_token_revoked_while_the_namespace_stays_is_never_used_again():
    """The owner removes the RoleBinding (or the opt-in label) and deletes the group: the
    namespace stays, so the token is revoked, not gone with it. The deleting group's teardown
    never asks Gitea with it (before: for up to drainTimeout + 30 s)."""
    reaper, asked_again = Reaper(), []
    poller = _poller(reaper, asked_again, namespace_deleting=_namespace_stays)
    await _rounds(poller, ReapOrder(GROUP, remove_hook=True, deleting=True))
    assert asked_again == []
    assert reaper.handles == []  # (kept for the rest of the grace only: the test below)


class Namespace:
    """A handle whose group's namespace is or is not being deleted, as the test says, and
    the handles it asked Gitea again with."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.deleting = False
        self.asked: list[object] = []
        self.last = LastGoodHandle(
            "team-a/ci",
            self._again,  # type: ignore[arg-type]
            self._deleting,
            clock=self.clock,
        )

    async def _again(self, spec: Any, handle: object, namespace: str) -> Any:
        self.asked.append(handle)
        return GOOD, "again"

    async def _deleting(self, namespace: str) -> bool:
        return self.deleting


async def test_a_token_revoked_before_the_group_is_deleted_is_not_used_by_its_teardown():
    """Revoked while the group was alive (its polls fail), then the group is deleted and its
    namespace goes only after the grace: never used (before issue 45: kept, and used by the
    teardown)."""
    ns = Namespace()
    spec = parse_spec(VALID)
    await ns.last.after(spec, False, GOOD, "first")  # type: ignore[arg-type]
    revoked = _gone("SecretNotAllowed")
    assert await ns.last.after(spec, False, revoked, None) == (revoked, None)
    assert await ns.last.after(spec, True, revoked, None) == (revoked, None)  # it stays
    ns.clock.now += LAST_GOOD_GRACE + 1
    ns.deleting = True  # the namespace goes, past the grace
    assert await ns.last.after(spec, True, revoked, None) == (revoked, None)
    assert ns.asked == [] and ns.last.handle is None


async def test_a_gitops_prune_that_deletes_the_secret_before_the_namespace_still_tears_down():
    """Flux prunes a team's folder: the Secret and the RoleBinding go first, the Namespace
    a few seconds later. The poll in between finds the credentials gone while the namespace
    stays: the handle is not used then, but kept, and serves the teardown once the
    namespace is being deleted (before: forgotten in that window, and the busy runner's
    registration stayed in Gitea)."""
    ns = Namespace()
    spec = parse_spec(VALID)
    await ns.last.after(spec, False, GOOD, "first")  # type: ignore[arg-type]
    gone = _gone("SecretNotFound")
    assert await ns.last.after(spec, True, gone, None) == (gone, None)  # it stays yet
    assert ns.asked == []
    ns.clock.now += 3.0
    ns.deleting = True
    assert await ns.last.after(spec, True, gone, None) == (GOOD, "again")
    assert ns.asked == ["first"]


async def test_the_last_good_handle_serves_only_its_own_spec_and_only_for_its_grace():
    clock = Clock()
    asked: list[object] = []

    async def again(spec: Any, handle: object, namespace: str) -> Any:
        asked.append(handle)
        return GOOD, "again"

    spec = parse_spec(VALID)
    edited = parse_spec({**VALID, "repo": "elsewhere"})
    gone = _gone("SecretForbidden")
    # A scope edited after the revocation: a new spec never gets the handle.
    last = LastGoodHandle("team-a/ci", again, _namespace_deleted, clock=clock)  # type: ignore[arg-type]
    await last.after(spec, False, GOOD, "first")  # type: ignore[arg-type]
    assert await last.after(edited, True, gone, None) == (gone, None)
    assert asked == [] and last.handle is None
    # The grace: served within LAST_GOOD_GRACE of the credentials first found gone, then not.
    last = LastGoodHandle("team-a/ci", again, _namespace_deleted, clock=clock)  # type: ignore[arg-type]
    await last.after(spec, False, GOOD, "first")  # type: ignore[arg-type]
    assert await last.after(spec, True, gone, None) == (GOOD, "again")
    clock.now += LAST_GOOD_GRACE + 1
    assert await last.after(spec, True, gone, None) == (gone, None)
    assert asked == ["first"] and last.handle is None
