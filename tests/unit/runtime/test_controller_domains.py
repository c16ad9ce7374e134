"""--sharding in the controller, as status shows it: each replica places only the groups of
the domains it holds, under its own membership identity, and stops placing a group once it
has handed its domain over."""

from __future__ import annotations

from kubernetes_asyncio import client

from gitea_runner_operator.runtime.controller import Controller
from gitea_runner_operator.settings import Settings
from gitea_runner_operator.sharding.leases.membership import MembershipLeases
from tests.support.builders import spec_with
from tests.support.leases import Clock, FakeLeases, without_runner_objects

# Ten repository groups apart, and two that a global group (whose polls work) joins into one
# Gitea-wide domain.
APART = {f"team/app{i}": spec_with(org=f"org{i}", repo="app") for i in range(10)}
OTHER = {"url": "https://other.example.com"}
WHOLE = {
    "team/top": spec_with(scope="global", org=None, repo=None, gitea=OTHER),
    "team/lib": spec_with(org="acme", repo="lib", gitea=OTHER),
}
GROUPS = {**APART, **WHOLE}


def replica(api: client.ApiClient, leases: FakeLeases, clock: Clock, name: str) -> Controller:
    membership = MembershipLeases(api, "ops", "gro", name, clock=clock, leases=leases)
    controller = Controller(api, Settings(sharding=True), membership=membership)
    without_runner_objects(controller.cache)
    assert controller.share is not None  # these replicas start one by one, in order
    controller.share.round.tenure.settle_reads = 0
    for key, spec in GROUPS.items():
        namespace, group = key.split("/")
        obj = {"metadata": {"namespace": namespace, "name": group}, "spec": spec}
        if key == "team/top":
            obj["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
        controller.cache.groups[0].cache[key] = obj
    return controller


async def rounds(*replicas: Controller, n: int = 3) -> None:
    for _ in range(n):
        for r in replicas:
            assert r.share is not None
            await r.share.round.round()


def placed(r: Controller) -> dict[str, dict[str, str]]:
    out = {}
    for key in GROUPS:
        where = r.share.placement(key)
        if where is not None:
            out[key] = where.status()
    return out


async def test_each_replica_shows_its_own_name_on_the_groups_it_serves() -> None:
    async with client.ApiClient() as api:
        leases, clock = FakeLeases(), Clock()
        a, b = replica(api, leases, clock, "a"), replica(api, leases, clock, "b")
        await rounds(a, b)
        by_a, by_b = placed(a), placed(b)
        assert by_a and by_b and not set(by_a) & set(by_b)
        assert set(by_a) | set(by_b) == set(GROUPS)
        for r, shown in ((a, by_a), (b, by_b)):
            assert r.share is not None
            assert set(shown) == {k for k in GROUPS if r.share.round.acts_on(k)}
            domain_of = r.share.layout().domain_of()
            for key, status in shown.items():
                assert status["id"] == domain_of[key]
                assert status["servedBy"] == r.share.round.tenure.me
        every = {**by_a, **by_b}
        assert every["team/top"] == every["team/lib"]
        assert every["team/lib"]["spans"] == "gitea"
        assert {every[k]["spans"] for k in APART} == {"family"}
        assert len({every[k]["id"] for k in APART}) == len(APART)


async def test_a_replica_stops_showing_the_groups_it_hands_over() -> None:
    async with client.ApiClient() as api:
        leases, clock = FakeLeases(), Clock()
        a = replica(api, leases, clock, "a")
        await rounds(a, n=2)
        assert set(placed(a)) == set(GROUPS)
        b = replica(api, leases, clock, "b")
        await rounds(b, a, b, a, b)
        assert placed(b) and set(placed(a)) == set(GROUPS) - set(placed(b))
        a.queue.shut_down()
        b.queue.shut_down()
