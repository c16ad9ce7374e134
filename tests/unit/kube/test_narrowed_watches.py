"""Issue 46: under --sharding a replica's Job and Pod watches are narrowed by the API server
to the shard buckets it holds, not filtered after the events arrive. A group taken is whole
in the cache before it opens (its bucket's list, an older bucket of a merged domain, and
objects made before the label); a bucket given away leaves the watches and the cache."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio import client

from gitea_runner_operator.api import constants
from gitea_runner_operator.kube.cache import ClusterCache
from gitea_runner_operator.kube.informer import Informer
from gitea_runner_operator.kube.narrowed import UNLABELLED_SELECTOR, shard_selector
from tests.support.leases import NoRunnerObjects
from tests.support.selector_api import SelectorAPI

NS = "team-a"


def job(name: str, group: str, shard: str | None) -> dict[str, Any]:
    labels = {
        constants.GROUP_NAME_LABEL: group,
        constants.MANAGED_BY_LABEL: "gitea-runner-operator",
    }
    if shard is not None:
        labels[constants.SHARD_LABEL] = shard
    return {"kind": "Job", "metadata": {"name": name, "namespace": NS, "labels": labels}}


async def until(condition: Any) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def test_a_reselect_lists_again_and_what_the_new_selector_leaves_is_deleted():
    api = SelectorAPI()
    api.put(job("a", "g1", "1"))
    api.put(job("b", "g1", "2"))
    events: list[tuple[str, str]] = []
    informer = Informer(
        "jobs/team-a",
        api,
        NS,
        label_selector=shard_selector(["1"]),
        handler=lambda kind, o, _: events.append((kind, o["metadata"]["name"])),
    )
    task = asyncio.create_task(informer.run())
    try:
        await until(informer.synced.is_set)
        assert sorted(informer.cache) == ["team-a/a"]
        assert informer.reselect(shard_selector(["2"]))
        assert not informer.reselect(shard_selector(["2"]))  # the same: nothing to do
        assert not informer.synced.is_set()
        await until(informer.synced.is_set)
        assert sorted(informer.cache) == ["team-a/b"]
        assert events == [("ADDED", "a"), ("DELETED", "a"), ("ADDED", "b")]
        assert ("watch", shard_selector(["2"])) in api.selectors
        api.put(job("c", "g1", "1"))  # the old bucket's: not sent any more
        api.put(job("d", "g1", "2"))
        await until(lambda: "team-a/d" in informer.cache)
        assert informer.received == 1 and "team-a/c" not in informer.cache
    finally:
        task.cancel()


class Cluster:
    """A shared ClusterCache whose owned informers list and watch the selector APIs."""

    def __init__(self, cache: ClusterCache) -> None:
        self.cache, self.jobs, self.pods = cache, SelectorAPI(), SelectorAPI()
        for informer in cache.informers:
            if informer.name.startswith("jobs"):
                informer._list_func = self.jobs
            elif informer.name.startswith("pods"):
                informer._list_func = self.pods
            else:
                informer._list_func = Empty()
        assert cache.share is not None
        cache.share._listers = {"jobs": self.jobs, "pods": self.pods}
        cache._custom = NoRunnerObjects()  # type: ignore[assignment]
        self.deleted: list[str] = []
        cache.on_owned_event(
            lambda _k, kind, obj, _b: (
                self.deleted.append(obj["metadata"]["name"]) if kind == "DELETED" else None
            )
        )

    def narrowed(self) -> Informer:
        return self.cache.jobs[0]

    def names(self, group: str) -> set[str]:
        return {j["metadata"]["name"] for j in self.cache.runner_jobs(f"{NS}/{group}")}


class Empty(SelectorAPI):
    """The RunnerGroups: none (these tests serve groups by key)."""


async def test_a_replica_is_sent_only_its_buckets_and_a_taken_group_is_whole_before_it_opens():
    async with client.ApiClient() as api:
        world = Cluster(ClusterCache(api, [NS], shared=True))
        world.jobs.put(job("g1-now", "g1", "5"))  # its domain's bucket
        world.jobs.put(job("g1-merged", "g1", "9"))  # made before its domain merged
        world.jobs.put(job("g1-old", "g1", None))  # made by a version before the label
        world.jobs.put(job("g2-same-bucket", "g2", "5"))  # a peer's group of that bucket
        world.jobs.put(job("g3-elsewhere", "g3", "6"))
        tasks = [asyncio.create_task(i.run()) for i in world.cache.informers]
        try:
            await world.cache.wait_synced()
            assert world.narrowed().label_selector == shard_selector([])  # holds nothing
            assert world.cache.received("jobs") == 0 and not world.narrowed().cache

            await world.cache.serve([f"{NS}/g1"], ["5"])
            assert world.names("g1") == {"g1-now", "g1-merged", "g1-old"}
            assert world.names("g2") == set()  # same bucket, not served: dropped
            assert world.narrowed().label_selector == shard_selector(["5", "9"])
            unlabelled = [i for i in world.cache.informers if "unlabelled" in i.name]
            assert {i.label_selector for i in unlabelled} == {UNLABELLED_SELECTOR}

            # Only the selected buckets' events are sent: g3's never reaches this replica.
            world.jobs.put(job("g3-second", "g3", "6"))
            world.jobs.put(job("g1-second", "g1", "5"))
            await until(lambda: "g1-second" in world.names("g1"))
            sent = world.cache.received("jobs")
            assert sent == 1, sent

            # The merged domain's last old Job goes: the older bucket leaves the selector.
            world.jobs.put(job("g1-merged", "g1", "9"), kind="DELETED")
            await until(lambda: "g1-merged" not in world.names("g1"))
            world.cache.narrow(["5"])
            assert world.narrowed().label_selector == shard_selector(["5"])
            await until(world.narrowed().synced.is_set)
            assert world.names("g1") == {"g1-now", "g1-old", "g1-second"}

            # Given away: its objects leave the cache, no DELETED is told for them (the
            # group is gone from this replica, nothing counts its Jobs as finished), and the
            # watches select nothing.
            before = list(world.deleted)
            world.cache.unserve([f"{NS}/g1"])
            world.cache.narrow([])
            await until(world.narrowed().synced.is_set)
            assert world.names("g1") == set() and not world.narrowed().cache
            assert world.deleted == before
            assert world.narrowed().label_selector == shard_selector([])
            assert not world.cache.knows(f"{NS}/g1")
        finally:
            for task in tasks:
                task.cancel()
