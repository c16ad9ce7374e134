"""A runner Pod that succeeded releases its Job's slot in the cluster cache at once (churn.py
reads the release), and the Job's own Complete event later is not a second release."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from gitea_runner_operator.api import constants
from gitea_runner_operator.kube.cache import ClusterCache

KEY = "team-a/ci"


def job(name: str, complete: bool = False) -> dict[str, Any]:
    conditions = [{"type": "Complete", "status": "True"}] if complete else []
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": {constants.GROUP_NAME_LABEL: "ci"},
            "annotations": {constants.TOOK_JOB_ANNOTATION: "true"},
        },
        "status": {"conditions": conditions},
    }


def pod(job_name: str, phase: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{job_name}-x1",
            "namespace": "team-a",
            "labels": {constants.GROUP_NAME_LABEL: "ci", "batch.kubernetes.io/job-name": job_name},
        },
        "status": {"phase": phase},
    }


async def test_a_succeeded_runner_pod_releases_its_job_once():
    now = [10.0]
    async with client.ApiClient() as api:
        cache = ClusterCache(api, ["team-a"], clock=lambda: now[0])
        cache._on_job("ADDED", job("ci-a"), None)
        cache._on_pod("ADDED", pod("ci-a", "Running"), None)
        assert cache.released_since(KEY, 0.0) == []
        now[0] = 20.0
        cache._on_pod("MODIFIED", pod("ci-a", "Succeeded"), pod("ci-a", "Running"))
        (release,) = cache.released_since(KEY, 0.0)
        assert (release.at, release.job_name, release.took_job) == (20.0, "ci-a", True)
        assert cache.changed_at(KEY) == 20.0
        now[0] = 30.0
        cache._on_pod("MODIFIED", pod("ci-a", "Succeeded"), pod("ci-a", "Succeeded"))
        cache._on_job("MODIFIED", job("ci-a", complete=True), job("ci-a"))
        cache._on_job("DELETED", job("ci-a", complete=True), job("ci-a", complete=True))
        assert [r.at for r in cache.released_since(KEY, 0.0)] == [20.0]
        assert cache.changed_at(KEY) == 20.0


async def test_a_failed_runner_pod_releases_nothing_the_job_may_retry_it():
    async with client.ApiClient() as api:
        cache = ClusterCache(api, ["team-a"], clock=lambda: 5.0)
        cache._on_job("ADDED", job("ci-b"), None)
        cache._on_pod("MODIFIED", pod("ci-b", "Failed"), pod("ci-b", "Running"))
        assert cache.released_since(KEY, 0.0) == []
