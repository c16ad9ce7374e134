"""The cluster cache keeps deleted runner Pods for a while (a reconcile after the deletion
reads why it happened), and then lets them go: memory follows what was deleted lately,
not everything a group ever deleted."""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio import client

from gitea_runner_operator.api import constants
from gitea_runner_operator.kube.cache import (
    DELETED_POD_MEMORY,
    DELETED_PODS_PER_GROUP,
    ClusterCache,
)


def runner_pod(group: str, name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": {constants.GROUP_NAME_LABEL: group},
            "annotations": {"note": "x" * 2000},  # what a Pod's last state weighs, about
        },
        "status": {"phase": "Failed", "reason": "Evicted"},
    }


def kept_bytes(cache: ClusterCache) -> int:
    return sum(
        len(json.dumps(obj)) for kept in cache._deleted_pods.values() for _, obj in kept.values()
    )


async def test_deleted_pods_expire_by_age_for_every_group_read_or_not():
    now = [1000.0]
    async with client.ApiClient() as api:
        cache = ClusterCache(api, ["team-a"], clock=lambda: now[0])
        for g in range(300):
            for p in range(DELETED_PODS_PER_GROUP + 10):
                cache._on_pod("DELETED", runner_pod(f"g{g}", f"p{p}"), None)
        assert sum(len(k) for k in cache._deleted_pods.values()) == 300 * DELETED_PODS_PER_GROUP
        before = kept_bytes(cache)
        assert before > 30_000_000  # 15,000 Pods of ~2 KB
        assert len(cache.deleted_pods("team-a/g0")) == DELETED_PODS_PER_GROUP
        now[0] += DELETED_POD_MEMORY + 1
        assert cache.deleted_pods("team-a/g0") == []  # hidden at once
        # and dropped, for the groups nobody reads too, once the next event comes
        cache._on_pod("DELETED", runner_pod("g1", "fresh"), None)
        assert list(cache._deleted_pods) == ["team-a/g1"]
        assert [o["metadata"]["name"] for o in cache.deleted_pods("team-a/g1")] == ["fresh"]
        assert kept_bytes(cache) < before / 10_000
