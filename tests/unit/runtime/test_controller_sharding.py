"""--sharding in the controller: its workers reconcile only the groups of the domains this
replica holds, and a group that moves away has its reconcile under way finished before the
replica publishes the view that gives it away."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator
from typing import Any

from kubernetes_asyncio import client

from gitea_runner_operator.api.shard import shard_label
from gitea_runner_operator.kube.lease_thread import LeaseTiming
from gitea_runner_operator.kube.narrowed import shard_selector
from gitea_runner_operator.reconcile.reconciler import Result
from gitea_runner_operator.runtime.controller import Controller
from gitea_runner_operator.runtime.leadership import Leadership, run_alone
from gitea_runner_operator.runtime.webhook_port import OperatorPort
from gitea_runner_operator.settings import Settings
from gitea_runner_operator.sharding.forwards import Split
from gitea_runner_operator.sharding.leases.keeper import MemberKeeper
from gitea_runner_operator.sharding.leases.membership import MembershipLeases, lease_name
from gitea_runner_operator.sharding.tenure import owner
from gitea_runner_operator.webhook.secrets import CachedSecretReader, WebhookSecretError
from tests.support.builders import spec_with
from tests.support.leases import Clock, FakeLeases, without_runner_objects

KEYS = [f"team/app{i}" for i in range(10)]


class Replica:
    def __init__(
        self,
        api: client.ApiClient,
        leases: FakeLeases,
        clock: Clock,
        name: str,
        webhook: str | None = None,
    ) -> None:
        membership = MembershipLeases(
            api, "ops", "gro", name, clock=clock, leases=leases, webhook=webhook
        )
        self.controller = Controller(api, Settings(sharding=True), membership=membership)
        without_runner_objects(self.controller.cache)
        assert self.controller.share is not None  # started one by one, in order
        self.controller.share.round.tenure.settle_reads = 0
        for i, key in enumerate(KEYS):
            obj = {"metadata": {"namespace": "team", "name": key.split("/")[1]},
                   "spec": spec_with(org=f"org{i}", repo="app")}  # fmt: skip
            self.controller.cache.groups[0].cache[key] = obj
        self.reconciled: list[str] = []
        self.hold: dict[str, asyncio.Event] = {}
        self.controller.reconciler.reconcile = self._reconcile  # type: ignore[method-assign]
        self.workers = [asyncio.create_task(self.controller.workers.work()) for _ in range(2)]

    async def _reconcile(self, key: str) -> Result:
        self.reconciled.append(key)
        if key in self.hold:
            await self.hold[key].wait()
        return Result()

    async def round(self) -> None:
        assert self.controller.share is not None
        await self.controller.share.round.round()
        await asyncio.sleep(0.01)  # the workers take what was queued

    def serves(self) -> set[str]:
        assert self.controller.share is not None
        return {k for k in KEYS if self.controller.share.round.acts_on(k)}

    async def close(self) -> None:
        self.controller.queue.shut_down()
        await asyncio.gather(*self.workers)


async def test_each_replica_reconciles_only_its_share() -> None:
    async with client.ApiClient() as api:
        leases, clock = FakeLeases(), Clock()
        a, b = Replica(api, leases, clock, "a"), Replica(api, leases, clock, "b")
        for _ in range(3):
            await a.round()
            await b.round()
        assert a.serves() and b.serves() and not a.serves() & b.serves()
        assert a.serves() | b.serves() == set(KEYS)
        a.reconciled.clear()
        b.reconciled.clear()
        for r in (a, b):
            for key in KEYS:  # every event reaches both replicas' queues
                r.controller.queue.add(key)
        await asyncio.sleep(0.05)
        assert set(a.reconciled) == a.serves() and set(b.reconciled) == b.serves()
        # Each replica's Job and Pod watches select exactly the buckets of its domains.
        for r in (a, b):
            share = r.controller.share
            assert share is not None and r.controller.cache.share is not None
            held = {shard_label(d) for d in share.round.tenure.held}
            assert r.controller.cache.share.selected == held
            for informer in (*r.controller.cache.jobs, *r.controller.cache.pods):
                assert informer.label_selector == shard_selector(held)
        assert not a.controller.cache.share.selected & b.controller.cache.share.selected  # type: ignore[union-attr]
        await a.close()
        await b.close()


async def test_a_replica_stops_watching_the_buckets_it_gave_away() -> None:
    """Issue 46: the API server sends a replica the Jobs and Pods of the buckets its watches
    select; once a joining replica took some of its domains, it must stop selecting their
    buckets, or it would go on receiving the newcomer's events."""
    async with client.ApiClient() as api:
        leases, clock = FakeLeases(), Clock()
        a = Replica(api, leases, clock, "a")
        for _ in range(3):
            await a.round()
        assert a.serves() == set(KEYS)
        assert a.controller.share is not None and a.controller.cache.share is not None
        everything = a.controller.cache.share.selected
        b = Replica(api, leases, clock, "b")
        for _ in range(3):
            await b.round()
            await a.round()
            a.controller.share.after_round()  # as its loop does after each round
        assert b.serves() and a.serves() == set(KEYS) - b.serves()
        held = {shard_label(d) for d in a.controller.share.round.tenure.held}
        assert a.controller.cache.share.selected == held < everything
        assert a.controller.cache.jobs[0].label_selector == shard_selector(held)
        await a.close()
        await b.close()


async def test_a_moving_group_finishes_its_reconcile_before_the_view_is_published() -> None:
    async with client.ApiClient() as api:
        leases, clock = FakeLeases(), Clock()
        a = Replica(api, leases, clock, "a")
        await a.round()
        await a.round()
        assert a.serves() == set(KEYS)
        b = Replica(api, leases, clock, "b")
        await b.round()  # b publishes {b}: a will give b its share
        await b.round()
        assert not b.serves()
        # Which groups move is rendezvous hashing's choice; hold one of them mid-reconcile.
        layout = a.controller.share.layout()
        both = {"a", "b"}
        moving = sorted(k for d, ks in layout.domains.items() if owner(d, both) == "b" for k in ks)
        assert moving
        a.hold[moving[0]] = asyncio.Event()
        a.controller.queue.add(moving[0])
        await asyncio.sleep(0.01)
        assert a.reconciled[-1] == moving[0]  # under way
        before = leases.objects[lease_name("gro", "a")]["metadata"]["annotations"]
        planning = asyncio.create_task(a.round())
        await asyncio.sleep(0.05)
        assert not planning.done()  # waits for the reconcile under way
        assert leases.objects[lease_name("gro", "a")]["metadata"]["annotations"] == before
        assert moving[0] not in a.serves()  # and starts no new one for it
        a.hold[moving[0]].set()
        await planning
        await b.round()
        assert b.serves() == set(moving) and not a.serves() & b.serves()
        await a.close()
        await b.close()


async def test_a_taken_group_s_gitea_is_asked_before_its_first_pass_comes_round() -> None:
    """Issue 46: after a SIGKILL the taken groups' jobs have waited a Lease duration already;
    their polls start with the take, not once each group's first pass has come round a
    queue that may hold hundreds of them."""
    async with client.ApiClient() as api:
        a = Replica(api, FakeLeases(), Clock(), "a")
        asked: list[str] = []

        async def observe(namespace: str, spec: Any, *args: Any) -> Any:
            asked.append(spec.org)
            await asyncio.Event().wait()  # the answer never comes: only the asking counts

        a.controller.pollers._observe = observe
        a.hold = {key: asyncio.Event() for key in KEYS}  # no pass gets past its start
        await a.round()
        await a.round()
        await asyncio.sleep(0.01)
        assert a.serves() == set(KEYS)
        assert len(a.reconciled) == 2  # two workers, each on a first pass that waits
        assert sorted(asked) == sorted(f"org{i}" for i in range(len(KEYS)))
        for event in a.hold.values():
            event.set()
        await a.controller.pollers.stop_all()
        await a.close()


def listed_without_watching(cache: Any) -> None:
    """Informers that list nothing and then wait: the controller runs with no API server."""

    async def run(informer: Any) -> None:
        informer.synced.set()
        await asyncio.Event().wait()

    for informer in cache.informers:
        informer.run = functools.partial(run, informer)


async def test_a_membership_lease_thread_that_cannot_open_ends_the_process_non_zero() -> None:
    """Without its Lease thread the replica could never hold a domain: it would sit alive
    and ready serving nothing. It exits 1, as with the leader Lease, so the Pod restarts."""

    @contextlib.asynccontextmanager
    async def broken() -> AsyncIterator[MembershipLeases]:
        raise OSError("no credentials")
        yield  # pragma: no cover

    timing = LeaseTiming(lease_duration=3, renew_deadline=1.5, retry_period=0.2, heartbeat_limit=1)
    async with client.ApiClient() as api:
        membership = MembershipLeases(api, "ops", "gro", "a", leases=FakeLeases())
        controller = Controller(
            api,
            Settings(sharding=True, retry_period=1, renew_deadline=2),
            membership=membership,
            member_keeper=MemberKeeper(broken, timing, lambda: 0.0),
        )
        listed_without_watching(controller.cache)
        stop = asyncio.Event()
        code = await asyncio.wait_for(run_alone(controller, stop), 5)
        assert code == 1 and not stop.is_set()
        assert controller.stopped.is_set()  # cleaned up on the way out


def port_of(controller: Controller) -> OperatorPort:
    """The webhook receiver's port over this controller, as the process wires it."""
    leadership = Leadership()
    leadership.controller = controller

    async def no_secret(where: object) -> bytes:
        raise WebhookSecretError("no hook secrets here")

    return OperatorPort(leadership, CachedSecretReader(None, read=no_secret), controller.metrics)


async def test_a_webhook_delivery_s_groups_are_split_by_the_replica_serving_them() -> None:
    async with client.ApiClient() as api:
        leases, clock = FakeLeases(), Clock()
        a = Replica(api, leases, clock, "a", webhook="10.0.0.1:8082")
        b = Replica(api, leases, clock, "b", webhook="10.0.0.2:8082")
        c = Replica(api, leases, clock, "c")  # webhooks off there: no address published
        for _ in range(3):
            for r in (a, b, c):
                await r.round()
        assert a.serves() and b.serves() and c.serves()
        got = await port_of(a.controller).split(KEYS)
        assert set(got.here) == a.serves()
        assert {k: set(v) for k, v in got.peers.items()} == {"10.0.0.2:8082": b.serves()}
        assert set(got.unreachable) == c.serves()
        # A delivery for its own groups only asks nobody.
        mine = sorted(a.serves())
        assert await port_of(a.controller).split(mine) == Split(tuple(mine))
        for r in (a, b, c):
            await r.close()


async def test_without_sharding_every_group_is_woken_here() -> None:
    async with client.ApiClient() as api:
        controller = Controller(api, Settings())
        assert await port_of(controller).split(KEYS) == Split(tuple(KEYS))
