"""A deleted group never wedges: whatever Gitea says after ``drainTimeout`` (a refusal, an
error, silence), the finalizer goes, with a Warning that names what was left behind; a
group without runners whose credentials are gone goes at once; the order to remove the
hook is never dropped, and nothing re-creates the hook while the group is deleted."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from gitea_runner_operator.api.gitea import ActionRunner
from gitea_runner_operator.api.hooks import HookStatus
from gitea_runner_operator.api.observation import Observation, Problem, ProblemKind, Snapshot
from gitea_runner_operator.api.runnergroup import parse_spec
from gitea_runner_operator.poll.pacing import Pacing
from gitea_runner_operator.poll.poller import GroupPoller
from gitea_runner_operator.poll.steps import gitea_steps
from gitea_runner_operator.reconcile.leftovers import Leftovers, describe
from gitea_runner_operator.reconcile.ports import ReapOrder
from gitea_runner_operator.reconcile.reconciler import FINALIZER
from tests.support.builders import VALID
from tests.support.fake_cluster import HOOKED, KEY, T0, FakeCluster, make, snapshot

GROUP = {"metadata": {"name": "ci", "namespace": "team-a", "uid": "u1"}}


def _leftover(uid: str = "uid-1") -> ActionRunner:
    """A registration named like this group's runners (its UID hash)."""
    from gitea_runner_operator.api.naming import new_job_name

    name = new_job_name("ci", uid) + "-bcdfg"
    return ActionRunner(id=41, name=name, ephemeral=True, status="offline")


async def test_a_refusing_gitea_cannot_hold_the_finalizer_past_the_drain_timeout():
    """Measured before: Gitea answered 403 to every runner delete and the group (drainTimeout
    30s) was still there 181 s after the delete, with no Event."""
    cluster = FakeCluster()
    cluster.deletion = "2026-01-01T00:01:00Z"
    reconciler, sources, cache = make(cluster, snapshot(started_at=200.0), wall=T0 + 90)
    uid = cache.group(KEY)["metadata"]["uid"]  # type: ignore[index]
    left = _leftover(uid)
    answered = snapshot(runners=(left,), started_at=200.0)  # Gitea answers; deletes fail
    sources.source.latest = answered
    await reconciler.reconcile(KEY)
    assert FINALIZER in cluster.finalizers  # still within the drain timeout
    assert sources.source.orders[-1].orphans  # the removal was ordered
    during_grace, _, _ = make(cluster, answered, wall=T0 + 60 + 300 + 10)
    await during_grace.reconcile(KEY)
    assert FINALIZER in cluster.finalizers  # the last removals get their grace
    late, _, _ = make(cluster, answered, wall=T0 + 60 + 300 + 31)
    await late.reconcile(KEY)
    assert FINALIZER not in cluster.finalizers
    assert ("Warning", "TeardownIncomplete") in cluster.events
    (message,) = [m for m in cluster.messages if "gave up" in m]
    assert left.name in message and "id 41" in message
    assert "refused or failed" in message


async def test_a_group_without_runners_whose_secrets_are_gone_goes_at_once():
    cluster = FakeCluster()
    cluster.deletion = "2026-01-01T00:01:00Z"
    gone = snapshot(
        problem=Problem("SecretNotFound", "Secret team-a/t not found", ProblemKind.SECRET),
        started_at=200.0,
    )
    reconciler, _, _ = make(cluster, gone, wall=T0 + 61)  # 1 s into a 5 min drain
    await reconciler.reconcile(KEY)
    assert FINALIZER not in cluster.finalizers
    assert any("Secret team-a/t not found" in m for m in cluster.messages)


async def test_a_hook_gitea_refuses_to_remove_is_named_and_does_not_hold_the_group():
    cluster = FakeCluster()
    cluster.deletion = "2026-01-01T00:01:00Z"
    answered = snapshot(started_at=200.0)
    waiting, sources, _ = make(cluster, answered, spec=HOOKED, wall=T0 + 90)
    await waiting.reconcile(KEY)
    assert FINALIZER in cluster.finalizers and sources.source.orders[-1].remove_hook
    late, sources, _ = make(cluster, answered, spec=HOOKED, wall=T0 + 60 + 300 + 31)
    sources.source.kept_hook_id = 17
    await late.reconcile(KEY)
    assert FINALIZER not in cluster.finalizers
    assert any("hook id 17" in m for m in cluster.messages)


def test_the_leftover_message_is_bounded_and_says_when_nothing_is_known():
    many = tuple(
        ActionRunner(id=i, name=f"ci-0000000a-abcde-{i:05d}", ephemeral=True) for i in range(50)
    )
    text = describe(Leftovers(registrations=many), "x")
    assert "and 40 more" in text and len(text) < 1200
    unknown = describe(Leftovers(registrations=None), "Gitea did not answer")
    assert "unknown" in unknown


class Hooks:
    """Records what the poll task asks of the hook keeper."""

    def __init__(self, removable: bool = True) -> None:
        self.calls: list[str] = []
        self.removable = removable

    def holds(self, key: str) -> bool:
        return True

    def kept_id(self, key: str) -> int | None:
        return 3

    async def keep(self, key: str, spec: Any, handle: Any) -> HookStatus:
        self.calls.append("keep")
        return HookStatus(True, "HookRegistered", "hook 3")

    async def remove(self, key: str, handle: Any) -> bool:
        self.calls.append("remove")
        return self.removable


async def _poll(poller: GroupPoller, rounds: int) -> None:
    poller.start()
    try:
        for _ in range(rounds):
            await asyncio.sleep(0.06)
            poller.wake()
        await asyncio.sleep(0.06)
    finally:
        await poller.stop()


def _poller(hooks: Hooks, answers: list[bool]) -> GroupPoller:
    """``answers``: per observation, whether Gitea could be asked (last one repeats)."""
    spec = parse_spec(
        {**VALID, "webhook": {"secretRef": {"name": "h", "key": "k"}, "manageHook": True}}
    )
    seen = 0

    async def observe(namespace: str, spec: Any, newer_than: float) -> Any:
        nonlocal seen
        ok = answers[min(seen, len(answers) - 1)]
        seen += 1
        if not ok:
            # A Secret not there yet: retried on the short Secret interval (fast here).
            problem = Problem("SecretNotFound", "not found", ProblemKind.SECRET)
            return Snapshot(0.0, "x", problem=problem), None
        snap = Snapshot(0.0, "x", observation=Observation(queued=(), runners=()))
        return snap, SimpleNamespace(forgejo=None)  # a Gitea handle

    return GroupPoller(
        "team-a/ci",
        spec,
        observe,
        lambda key: None,
        gitea_steps(hooks=hooks),  # type: ignore[arg-type]
        pacing=Pacing(min_refresh=0.01, secret_retry=0.01),
    )


async def test_the_hook_removal_of_a_group_without_runners_is_never_dropped():
    hooks = Hooks()
    poller = _poller(hooks, [True])
    poller.submit(ReapOrder(GROUP, remove_hook=True, deleting=True))  # no runner to reap
    await _poll(poller, 2)
    assert "remove" in hooks.calls and poller.hook_removed
    assert "keep" not in hooks.calls  # never re-created while the group is deleted


async def test_an_order_survives_a_pass_where_gitea_could_not_be_asked():
    hooks = Hooks()
    poller = _poller(hooks, [False, True])
    poller.submit(ReapOrder(GROUP, remove_hook=True, deleting=True))
    await _poll(poller, 2)
    assert hooks.calls and set(hooks.calls) == {"remove"}


async def test_a_deleting_group_never_keeps_its_hook_even_between_orders():
    hooks = Hooks(removable=False)  # Gitea refuses: the removal is retried, never a keep
    poller = _poller(hooks, [True])
    poller.submit(ReapOrder(GROUP, remove_hook=True, deleting=True))
    poller.submit(ReapOrder(GROUP, deleting=True))  # a later plan without the hook flag
    await _poll(poller, 3)
    assert "keep" not in hooks.calls and "remove" in hooks.calls


async def test_a_secret_read_that_failed_once_does_not_release_the_group_early():
    cluster = FakeCluster()
    cluster.deletion = "2026-01-01T00:01:00Z"
    hiccup = snapshot(
        problem=Problem("SecretReadFailed", "retrying", ProblemKind.CLUSTER), started_at=200.0
    )
    reconciler, _, _ = make(cluster, hiccup, wall=T0 + 61)
    await reconciler.reconcile(KEY)
    assert FINALIZER in cluster.finalizers


async def test_a_pass_on_the_stale_copy_after_the_release_warns_no_second_time():
    """Seen on the testbed: the finalizer's own update queued one more pass before the watch
    showed the object gone, and that pass gave up (and warned) again."""
    cluster = FakeCluster()
    cluster.deletion = "2026-01-01T00:01:00Z"
    down = snapshot(problem=Problem("GiteaUnreachable", "no answer"), started_at=200.0)
    reconciler, _, _ = make(cluster, down, wall=T0 + 60 + 301)
    await reconciler.reconcile(KEY)
    assert FINALIZER not in cluster.finalizers
    cluster.finalizers = [FINALIZER]  # the cache's copy from before the release
    await reconciler.reconcile(KEY)
    assert cluster.events.count(("Warning", "TeardownIncomplete")) == 1
    assert FINALIZER in cluster.finalizers  # not patched again
