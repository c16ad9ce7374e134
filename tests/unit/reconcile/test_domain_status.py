"""Where a group is served, as a user sees it with ``--sharding``: ``status.domain`` (its
capacity domain, the replica serving it, and whether the domain spans the whole Gitea) and
the ``group_domain_info`` series, both changing only when the domain or its replica does.
Without sharding a group's status says nothing new."""

from __future__ import annotations

from typing import Any

from gitea_runner_operator.api import constants
from gitea_runner_operator.api.placement import Placement
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.api.shard import SHARDS
from gitea_runner_operator.sharding.domains import Shape
from gitea_runner_operator.sharding.tenure import Layout
from tests.support import fake_cluster as fake
from tests.support.gitops import World, quiet

INFO = "gitea_runner_operator_group_domain_info"
GROUP = {"namespace": "team-a", "runnergroup": "ci"}


def sharded(world: World, where: dict[str, Placement | None]) -> None:
    """The world's operator runs with --sharding; ``where[key]`` says where it serves."""
    world.reconciler = fake.fresh_reconciler(
        world.cache, world.cluster, world.sources, world.clock, world.wall, placement=where.get
    )


def info(world: World, domain: str, replica: str) -> float | None:
    registry = world.reconciler._metrics.registry
    return registry.get_sample_value(INFO, {**GROUP, "domain": domain, "replica": replica})  # type: ignore[no-any-return]


async def quiet_hour(world: World) -> None:
    for _ in range(60):
        world.sources.source.latest = quiet(world.wall.now + 60)
        await world.pass_after(60)


async def test_the_serving_replica_writes_the_domain_once_and_again_only_when_it_moves():
    world = World(quiet(fake.T0 + 30))
    where: dict[str, Placement | None] = {fake.KEY: Placement("d-0123456789ab", "gro-a_1", False)}
    sharded(world, where)
    await world.pass_after(1)
    status: dict[str, Any] = world.cluster.status or {}
    assert status["domain"] == {"id": "d-0123456789ab", "servedBy": "gro-a_1", "spans": "family"}
    assert info(world, "d-0123456789ab", "gro-a_1") == 1
    written = world.cluster.status_writes
    await quiet_hour(world)
    assert world.cluster.status_writes == written  # quiet status: nothing to say

    # A global group joined the Gitea's families: the same domain now spans the Gitea. A
    # placement alone writes nothing (issue 46: a hand-over's burst of status writes); the
    # series says it at once, and the status with the next write the group needs.
    where[fake.KEY] = Placement("d-0123456789ab", "gro-a_1", True)
    await world.pass_after(1)
    assert world.cluster.status_writes == written
    world.sources.source.latest = fake.snapshot(queued=1, started_at=world.wall.now)
    await world.pass_after(1)
    assert world.cluster.status_writes == written + 1
    assert world.cluster.status["domain"]["spans"] == "gitea"  # type: ignore[index]

    # Another replica took the domain over: the old replica's series of the group went with
    # the hand-over, the new one's comes at once, and its name rides on the next write.
    await world.reconciler.memory.handed_over(fake.KEY)
    assert info(world, "d-0123456789ab", "gro-a_1") is None
    where[fake.KEY] = Placement("d-0123456789ab", "gro-b_2", True)
    await world.pass_after(1)
    assert info(world, "d-0123456789ab", "gro-b_2") == 1
    assert world.cluster.status_writes == written + 1  # no write for the hand-over alone
    assert world.cluster.status["domain"]["servedBy"] == "gro-a_1"  # type: ignore[index]
    world.sources.source.latest = quiet(world.wall.now + 60)
    await world.pass_after(60)
    assert world.cluster.status["domain"]["servedBy"] == "gro-b_2"  # type: ignore[index]
    assert world.cluster.status_writes == written + 2

    # A domain this replica is about to release (its layout changed) is left as it is.
    where[fake.KEY] = None
    world.sources.source.latest = fake.snapshot(queued=2, started_at=world.wall.now + 60)
    await world.pass_after(60)
    assert world.cluster.status["domain"]["servedBy"] == "gro-b_2"  # type: ignore[index]


async def test_a_new_domain_replaces_the_groups_series_rather_than_adding_one():
    world = World(quiet(fake.T0 + 30))
    where: dict[str, Placement | None] = {fake.KEY: Placement("d-000000000001", "gro-a_1", False)}
    sharded(world, where)
    await world.pass_after(1)
    where[fake.KEY] = Placement("d-000000000002", "gro-a_1", False)
    await world.pass_after(1)
    assert info(world, "d-000000000001", "gro-a_1") is None
    assert info(world, "d-000000000002", "gro-a_1") == 1


async def test_one_replica_says_nothing_new_and_drops_a_domain_left_by_sharding():
    world = World(quiet(fake.T0 + 30))
    await world.pass_after(1)
    assert "domain" not in (world.cluster.status or {})
    registry = world.reconciler._metrics.registry
    assert not [m for m in registry.collect() if m.name == INFO[:-5] and m.samples]

    # An operator that ran with --sharding before left a domain: it goes with one write.
    world.cluster.status = {
        **(world.cluster.status or {}),
        "domain": {"id": "d-0123456789ab", "servedBy": "gro-a_1", "spans": "family"},
    }
    written = world.cluster.status_writes
    world.restart()
    await world.pass_after(1)
    assert "domain" not in (world.cluster.status or {})
    assert world.cluster.status_writes == written + 1
    await quiet_hour(world)
    assert world.cluster.status_writes == written + 1


def test_a_global_group_makes_every_group_of_its_gitea_show_a_gitea_wide_domain():
    a, b, x = "https://a.example", "https://b.example", frozenset({"x"})
    layout = Layout.of(
        [
            Shape("ns/app", a, Scope.REPO, "acme", "app", x),
            Shape("ns/top", a, Scope.GLOBAL, None, None, frozenset({"arm"})),  # no label shared
            Shape("ns/lib", b, Scope.REPO, "acme", "lib", x),
        ]
    )
    by_key = layout.domain_of()
    whole = by_key["ns/app"]
    assert by_key["ns/top"] == whole
    placed = layout.placement(whole, layout.domains[whole], "gro-a_1")
    assert placed is not None and placed.status()["spans"] == "gitea"
    alone = by_key["ns/lib"]
    placed = layout.placement(alone, layout.domains[alone], "gro-a_1")
    assert placed is not None and placed.status() == {
        "id": alone,
        "servedBy": "gro-a_1",
        "spans": "family",
    }
    # Held with other groups than this layout gives it: about to be released, not shown.
    assert layout.placement(alone, frozenset({"ns/lib", "ns/gone"}), "gro-a_1") is None
    assert layout.placement("d-unknown", frozenset({"ns/lib"}), "gro-a_1") is None


async def test_a_group_that_comes_back_remembers_nothing_of_its_earlier_tenure():
    """--sharding: a group moves away and back. While away, its Jobs' events were not this
    replica's to see: a runner Job it created just before the move (no watch event yet)
    may have run and gone. Counting it as still on its way would leave a queued job without
    a runner until the expectation lapsed (a minute)."""
    cluster = fake.FakeCluster()  # the watch lags: the create is not seen before the move
    reconciler, sources, _ = fake.make(cluster, fake.snapshot(queued=1))
    await reconciler.reconcile(fake.KEY)
    assert cluster.creates == 1
    await reconciler.memory.handed_over(fake.KEY)  # released; another replica serves it for a while
    cluster.unsynced.clear()  # ... long enough for that runner to run its job and go
    sources.source.latest = fake.snapshot(queued=1)  # back here, with a new queued job
    await reconciler.reconcile(fake.KEY)
    assert cluster.creates == 2


async def test_a_runner_job_carries_the_shard_of_the_domain_it_is_served_in():
    """Each replica's Job and Pod watches select the shard buckets of the domains it holds:
    a runner Job (and its Pod template) must carry its group's domain's bucket, not the
    group's own, or the replica serving it would never see it."""
    world = World(fake.snapshot(queued=1, started_at=fake.T0))
    sharded(world, {fake.KEY: Placement("d-0000000000ff", "gro-a_1", False)})
    await world.pass_after(1)
    world.cluster.sync()
    (job,) = world.cluster.jobs.values()
    assert job["metadata"]["labels"][constants.SHARD_LABEL] == str(0xFF % SHARDS)
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    assert pod_labels[constants.SHARD_LABEL] == str(0xFF % SHARDS)
