"""One register of per-group memory: after ``gone(key)`` no registered holder knows ``key``,
after ``handed_over(key)`` none that a hand-over forgets does, and the rest keep theirs.
Shown over random event sequences, first on holders of the register's own kind, then on
the reconciler's real holders driven by passes, hand-overs and deletions."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes_asyncio import client

from gitea_runner_operator.kit.group_memory import GroupMemory, Table
from gitea_runner_operator.reconcile.steps.status_later import LaterWrites
from gitea_runner_operator.runtime.controller import Controller
from gitea_runner_operator.settings import Settings
from tests.support import fake_cluster as fake

KEYS = ("ns/a", "ns/b", "other/c")


class _Async:
    """A holder whose forgetting is awaited, as a poll task's stop is."""

    def __init__(self) -> None:
        self.kept: set[str] = set()

    async def forget(self, key: str) -> None:
        await asyncio.sleep(0)
        self.kept.discard(key)

    def knows(self, key: str) -> bool:
        return key in self.kept

    def note(self, key: str) -> None:
        self.kept.add(key)


class _Sync(Table[int]):
    def __init__(self) -> None:
        self.kept: dict[str, int] = {}
        super().__init__(self.kept)

    def note(self, key: str) -> None:
        self.kept[key] = self.kept.get(key, 0) + 1


EVENTS = st.lists(
    st.tuples(
        st.sampled_from(("note", "gone", "handed_over", "register")),
        st.sampled_from(KEYS),
        st.integers(min_value=0, max_value=5),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(EVENTS)
def test_after_gone_no_registered_holder_knows_the_key(events: list[tuple[str, str, int]]):
    async def run() -> None:
        memory = GroupMemory()
        holders: list[tuple[Any, bool]] = []
        for _ in range(2):  # some from the start; more may come later ("register")
            holders.append((memory.keep(_Async()), True))
            holders.append((memory.keep(_Sync(), handed_over=False), False))
        for what, key, which in events:
            if what == "register":
                holder = _Async() if which % 2 else _Sync()
                on_hand_over = which % 3 != 0
                holders.append((memory.keep(holder, handed_over=on_hand_over), on_hand_over))
            elif what == "note":
                holders[which % len(holders)][0].note(key)
            elif what == "gone":
                await memory.gone(key)
                assert memory.knowing(key) == []
            else:
                kept_before = [h for h, on in holders if not on and h.knows(key)]
                await memory.handed_over(key)
                assert not [h for h, on in holders if on and h.knows(key)]
                assert [h for h, on in holders if not on and h.knows(key)] == kept_before

    asyncio.run(run())


def test_a_holder_registered_twice_is_forgotten_once():
    memory = GroupMemory()
    holder = _Sync()
    assert memory.keep(holder) is memory.keep(holder)
    assert memory.holders == [holder]


class _Cache(fake.FakeCache):
    """The fake cache, where the group may be deleted (and made again)."""

    deleted = False

    def group(self, key: str) -> dict[str, Any]:
        return None if self.deleted else super().group(key)  # type: ignore[return-value]


class _Sources(fake.FakeSources):
    """Poll tasks that start on ``ensure`` and end on ``stop``."""

    def __init__(self, snapshot: Any) -> None:
        super().__init__(snapshot)
        self.running: set[str] = set()

    def get(self, key: str) -> Any:
        return self.source if key in self.running else None

    async def ensure(self, key: str, spec: Any) -> Any:
        self.running.add(key)
        return self.source

    async def stop(self, key: str) -> None:
        await super().stop(key)
        self.running.discard(key)


class _Later(LaterWrites):
    """Counts how often a group's pending write is forgotten."""

    def __init__(self) -> None:
        super().__init__(retry=lambda key: None)
        self.forgotten = 0

    def forget(self, key: str) -> None:
        self.forgotten += 1
        super().forget(key)


def holders_within(obj: object) -> list[Any]:
    """Every attribute of ``obj`` that keeps something per group (it can ``forget`` a key
    and say whether it ``knows`` one): found, not listed, so that a holder added later and
    not registered fails the tests below."""
    found = []
    for name in dir(obj):
        value = getattr(obj, name, None)
        if callable(getattr(value, "forget", None)) and callable(getattr(value, "knows", None)):
            found.append(value)
    return found


REAL_EVENTS = st.lists(
    st.tuples(
        st.sampled_from(("pass", "handed_over", "gone", "invalid")),
        st.integers(min_value=0, max_value=3),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(REAL_EVENTS)
def test_the_reconcilers_holders_forget_a_deleted_group(events: list[tuple[str, int]]):
    """Passes (with jobs queued, or a spec that cannot be read), hand-overs and deletions in
    any order: once a pass finds the group deleted, nothing the reconciler registered still
    knows it, and each hand-over forgot its pending status write once."""

    async def run() -> None:
        cluster = fake.FakeCluster(watch="eager")
        sources = _Sources(fake.snapshot())
        cache = _Cache(cluster, {**fake.VALID, "maxActiveRunners": 3})
        later = _Later()
        wall = fake.Clock(fake.T0 + 30)
        reconciler = fake.fresh_reconciler(cache, cluster, sources, None, wall, status_writes=later)
        try:
            for what, n in events:
                cache.deleted = False
                if what == "pass":
                    sources.source.latest = fake.snapshot(queued=n)
                    cache.spec = {**fake.VALID, "maxActiveRunners": 3}
                    await reconciler.reconcile(fake.KEY)
                elif what == "invalid":
                    cache.spec = {**fake.VALID, "maxActiveRunners": "many"}
                    await reconciler.reconcile(fake.KEY)
                elif what == "handed_over":
                    before = later.forgotten
                    await reconciler.memory.handed_over(fake.KEY)
                    assert later.forgotten == before + 1
                else:
                    cache.deleted = True
                    await reconciler.reconcile(fake.KEY)
                    assert reconciler.memory.knowing(fake.KEY) == []
                    assert [h for h in holders_within(reconciler) if h.knows(fake.KEY)] == []
                    assert fake.KEY not in reconciler._states  # its backoffs went too
                wall.now += 2
        finally:
            await later.close()

    asyncio.run(run())


async def test_every_holder_of_the_controller_is_registered():
    api = client.ApiClient()
    controller = Controller(api, Settings())
    await api.close()
    registered = controller.memory.holders
    reached = {id(h) for h in registered} | {id(getattr(h, "sources", None)) for h in registered}
    missing = [type(h).__name__ for h in holders_within(controller) if id(h) not in reached]
    assert missing == []
    tables = [h for h in registered if isinstance(h, Table)]
    assert any(t._table is controller.losses.retiring for t in tables)  # LossFollowUp's
    assert {type(h).__name__ for h in holders_within(controller)} >= {
        "ClusterCache", "HookKeeper", "Enroller", "PendingLosses",
        "LaterWrites", "Expectations", "Pollers", "Metrics",
    }  # fmt: skip
