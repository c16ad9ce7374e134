"""--sharding: a replica's informers keep the runner Jobs and Pods of the groups it serves
and drop every other group's as they come in; a group it begins to serve is fetched whole
before it is served, and one it gives away leaves its memory. One replica keeps everything."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from kubernetes_asyncio import client

from gitea_runner_operator.api import constants
from gitea_runner_operator.kube.cache import ClusterCache
from gitea_runner_operator.sharding.leases.membership import MembershipLeases
from gitea_runner_operator.sharding.leases.round import Sharding, layout_of
from tests.support.api_response import FakeResponse
from tests.support.builders import spec_with
from tests.support.leases import Clock, FakeLeases, NoRunnerObjects

SHARD = "7"  # the bucket of the groups' domains in these tests


def owned(
    kind: str, group: str, name: str, rv: str = "1", shard: str | None = SHARD
) -> dict[str, Any]:
    labels = {constants.GROUP_NAME_LABEL: group, constants.MANAGED_BY_LABEL: "x"}
    if shard is not None:
        labels[constants.SHARD_LABEL] = shard
    return {
        "kind": kind,
        "metadata": {"name": name, "namespace": "team-a", "resourceVersion": rv, "labels": labels},
        "status": {},
    }


class Listing:
    """A namespaced list call of the API, answering with the objects its selector picks."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = objects
        self.selectors: list[str] = []
        self.during: Any = None  # run while the answer is on its way (a watch event)

    async def __call__(self, namespace: str, label_selector: str, **_: Any) -> FakeResponse:
        self.selectors.append(label_selector)
        names = label_selector.split(f"{constants.GROUP_NAME_LABEL} in (", 1)[1]
        names = names.rstrip(")").split(",")
        picked = [
            o for o in self.objects if o["metadata"]["labels"][constants.GROUP_NAME_LABEL] in names
        ]
        if self.during is not None:
            self.during()
        return FakeResponse(200, json.dumps({"items": picked}).encode())


async def shared_cache(api: client.ApiClient, namespaces: list[str] | None = None) -> Any:
    cache = ClusterCache(api, namespaces, shared=True)
    jobs = Listing([owned("Job", "g1", "g1-a"), owned("Job", "g2", "g2-a")])
    pods = Listing([owned("Pod", "g1", "g1-a-xxxxx"), owned("Pod", "g2", "g2-a-xxxxx")])
    cache.share._listers = {"jobs": jobs, "pods": pods}
    cache._custom = NoRunnerObjects()  # type: ignore[assignment]
    return cache, jobs, pods


async def test_a_replica_keeps_only_the_jobs_and_pods_of_the_groups_it_serves():
    async with client.ApiClient() as api:
        cache, _, _ = await shared_cache(api)
        for g in ("g1", "g2", "g3"):  # watch events before any group is served: all dropped
            cache.jobs[0]._apply("ADDED", owned("Job", g, f"{g}-b"))
            cache.pods[0]._apply("ADDED", owned("Pod", g, f"{g}-b-xxxxx"))
        assert cache.jobs[0].cache == {} and cache.pods[0].cache == {}
        await cache.serve(["team-a/g1"], [SHARD])
        # fetched whole: what existed before serving (g1-b arrived while dropped)
        assert {j["metadata"]["name"] for j in cache.runner_jobs("team-a/g1")} == {"g1-a"}
        assert [p["metadata"]["name"] for p in cache.runner_pods("team-a/g1")] == ["g1-a-xxxxx"]
        cache.jobs[0]._apply("ADDED", owned("Job", "g1", "g1-c"))
        cache.jobs[0]._apply("ADDED", owned("Job", "g2", "g2-c"))
        assert sorted(cache.jobs[0].cache) == ["team-a/g1-a", "team-a/g1-c"]
        assert cache.runner_jobs("team-a/g2") == []
        cache.unserve(["team-a/g1"])
        assert cache.jobs[0].cache == {} and cache.pods[0].cache == {}
        assert cache.runner_jobs("team-a/g1") == [] and cache.runner_pods("team-a/g1") == []


async def test_a_watch_event_during_the_fetch_keeps_its_word():
    async with client.ApiClient() as api:
        cache, jobs, _ = await shared_cache(api)
        newer = owned("Job", "g1", "g1-a", rv="9")
        newer["status"] = {"succeeded": 1}
        jobs.during = lambda: cache.jobs[0]._apply("MODIFIED", newer)
        await cache.serve(["team-a/g1"], [SHARD])
        assert cache.jobs[0].cache["team-a/g1-a"]["metadata"]["resourceVersion"] == "9"


async def test_a_fetch_is_narrowed_to_the_groups_taken_per_namespace():
    async with client.ApiClient() as api:
        cache, jobs, pods = await shared_cache(api, ["team-a", "team-b"])
        await cache.serve(["team-a/g1", "team-a/g2"], [SHARD])
        assert jobs.selectors == [
            f"{constants.MANAGED_SELECTOR},{constants.GROUP_NAME_LABEL} in (g1,g2)"
        ]
        assert len(pods.selectors) == 1
        await cache.serve(["team-a/g1", "team-a/g2"], [SHARD])  # fetched already: not listed again
        assert len(jobs.selectors) == 1


async def test_one_replica_keeps_every_groups_objects_as_before():
    async with client.ApiClient() as api:
        cache = ClusterCache(api, None)
        for g in ("g1", "g2"):
            cache.jobs[0]._apply("ADDED", owned("Job", g, f"{g}-b"))
        assert len(cache.jobs[0].cache) == 2
        await cache.serve(["team-a/g1"], [SHARD])  # no share: nothing changes
        cache.unserve(["team-a/g1"])
        assert len(cache.jobs[0].cache) == 2 and cache.runner_jobs("team-a/g1")


def test_a_new_owner_serves_a_group_only_once_its_objects_are_fetched():
    groups = {"ns/app": {"spec": spec_with(org="o", repo="app")}}

    async def main() -> None:
        api, clock = FakeLeases(), Clock()
        taken: list[frozenset[str]] = []
        fetches: list[frozenset[str]] = []
        fail = [True]

        async def prepare(keys: frozenset[str]) -> None:
            fetches.append(keys)
            assert not sharding.acts_on("ns/app")  # nothing acts while the view is partial
            if fail[0]:
                raise OSError("list failed")

        async def release(keys: frozenset[str]) -> None:
            pass

        leases = MembershipLeases(None, "ops", "gro", "a", clock=clock, leases=api)  # type: ignore[arg-type]
        sharding = Sharding(
            leases,
            lambda: layout_of(groups.items()),
            take=taken.append,
            release=release,
            prepare=prepare,
            clock=clock,
        )
        await sharding.round()
        await sharding.round()  # holds the domain; the fetch fails: not served yet
        assert fetches == [frozenset(groups)] and not taken
        assert not sharding.acts_on("ns/app")
        fail[0] = False
        await sharding.round()  # fetched on the next round: served
        assert taken == [frozenset(groups)] and sharding.acts_on("ns/app")

    asyncio.run(main())


def full_group(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "team-a", "resourceVersion": "5", "uid": name},
        "spec": spec_with(),
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Polling", "message": "x" * 200},
                {"type": "RunnersHealthy", "status": "True", "reason": "Healthy"},
            ],
            "waiting": {"count": 3, "jobs": ["y" * 100] * 3},
            "runners": {"idle": 1, "busy": 2, "starting": 0},
        },
    }


class Groups:
    """The namespace's RunnerGroups, listed whole."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = list(objects)

    async def list_namespaced_custom_object(self, *args: Any, **_: Any) -> FakeResponse:
        return FakeResponse(200, json.dumps({"items": self.objects}).encode())


async def test_a_replica_keeps_the_groups_it_does_not_serve_slim_and_reads_a_taken_one_whole():
    """Issue 46: every replica kept every RunnerGroup whole, status included (about 6 of a
    group's 9 KB). A group served elsewhere is kept with what the layout reads: its spec and
    whether it is Ready."""
    async with client.ApiClient() as api:
        cache, _, _ = await shared_cache(api)
        g1, g2 = full_group("g1"), full_group("g2")
        cache._custom = Groups(g1, g2)
        for g in (g1, g2):
            cache.groups[0]._apply("ADDED", g)
        slim = cache.group("team-a/g2")
        assert slim["spec"] == g2["spec"]
        assert slim["status"] == {"conditions": [{"type": "Ready", "status": "True"}]}
        await cache.serve(["team-a/g1"], [SHARD])
        assert cache.group("team-a/g1")["status"] == g1["status"]  # whole before it is served
        assert cache.group("team-a/g2")["status"] != g2["status"]
        changed = {**g1, "metadata": {**g1["metadata"], "resourceVersion": "6"}}
        cache.groups[0]._apply("MODIFIED", changed)  # the watch, while served: whole
        assert cache.group("team-a/g1")["status"] == g1["status"]
        cache.unserve(["team-a/g1"])
        assert "waiting" not in cache.group("team-a/g1")["status"]


async def test_a_taken_share_s_namespaces_are_fetched_side_by_side():
    """Issue 46: the fetch is on the path of a SIGKILL's hand-over; one namespace after
    another, a survivor waited 2.7 s for 12 lists of 4 namespaces on a busy API server."""
    namespaces = [f"team-{i}" for i in range(4)]
    async with client.ApiClient() as api:
        cache, jobs, pods = await shared_cache(api, namespaces)
        flight = {"now": 0, "most": 0}

        class Slow(Listing):
            async def __call__(self, namespace: str, label_selector: str, **_: Any) -> Any:
                flight["now"] += 1
                flight["most"] = max(flight["most"], flight["now"])
                await asyncio.sleep(0.01)
                flight["now"] -= 1
                return await super().__call__(namespace, label_selector)

        cache.share._listers = {"jobs": Slow(jobs.objects), "pods": Slow(pods.objects)}
        await cache.serve([f"{ns}/g1" for ns in namespaces])
        assert flight["most"] > 1
        assert all(cache.serves(f"{ns}/g1") for ns in namespaces)
