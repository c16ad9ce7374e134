"""--sharding: a group's poll task writes to Gitea and the API server only while this
replica holds the group's domain, checked at each write (kit/fence.py), not only when a step
begins. Gitea is the real client against aioresponses and the API server write is the real
write path (kube/http.write) over a fake request, so what is refused is what would have left."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import aiohttp
import pytest
from aioresponses import CallbackResult, aioresponses

from gitea_runner_operator.api.observation import Observation, Snapshot
from gitea_runner_operator.api.runnergroup import Scope, parse_spec
from gitea_runner_operator.forge.client import GiteaClient
from gitea_runner_operator.forge.observe import GiteaHandle
from gitea_runner_operator.forge.scope import ScopeRef
from gitea_runner_operator.kit import fence
from gitea_runner_operator.kube.http import write
from gitea_runner_operator.kube.ratelimit import TokenBucket
from gitea_runner_operator.poll.poller import GroupPoller
from gitea_runner_operator.poll.reaper import Reaper
from gitea_runner_operator.poll.steps import ReapStep
from gitea_runner_operator.reconcile.ports import ReapOrder
from tests.support.api_response import FakeResponse
from tests.support.builders import VALID
from tests.support.fake_cluster import FakeCache, FakeCluster, runner_pod
from tests.support.poller import CANDIDATE, GROUP, IDLE

BASE = "http://gitea.test"
REPO = ScopeRef(Scope.REPO, "acme", "widgets")
RUNNER = re.compile(r"^http://gitea\.test/api/v1/repos/acme/widgets/actions/runners/7$")
JOBS = re.compile(r"^http://gitea\.test/api/v1/repos/acme/widgets/actions/jobs(\?.*)?$")
KEY = "team-a/ci"
RUNNER_JSON = {"id": 7, "name": "ci-h-jobxx-podxx", "status": "idle", "ephemeral": True}


class WrittenCluster(FakeCluster):
    """The fake cluster, whose Job deletion goes through the real write path."""

    async def delete_job(self, namespace: str, name: str) -> bool:
        await write(TokenBucket(qps=100, burst=100), namespace, self._sent)
        return await super().delete_job(namespace, name)

    async def _sent(self) -> FakeResponse:
        return FakeResponse(200)


def writes(mocked: aioresponses) -> list[str]:
    """The Gitea requests that change something, as ``METHOD url``."""
    return [f"{m} {u}" for (m, u) in mocked.requests if m not in ("GET", "HEAD")]


def gitea_answers(mocked: aioresponses, on_disable: Any = None) -> None:
    def disabled(url: Any, **kwargs: Any) -> CallbackResult:
        if on_disable is not None:
            on_disable()
        return CallbackResult(payload={**RUNNER_JSON, "disabled": True})

    mocked.patch(RUNNER, callback=disabled, repeat=True)
    mocked.get(RUNNER, payload={**RUNNER_JSON, "disabled": True}, repeat=True)
    mocked.get(JOBS, payload={"jobs": [], "total_count": 0}, repeat=True)
    mocked.delete(RUNNER, status=204, repeat=True)


def reaper_over_cluster() -> tuple[Reaper, WrittenCluster]:
    cluster = WrittenCluster()
    cluster.put_jobs({"metadata": {"name": "ci-h-jobxx", "creationTimestamp": None}})
    cluster.pods = [runner_pod("ci-h-jobxx", "ci-h-jobxx-podxx")]
    return Reaper(cluster, FakeCache(cluster)), cluster  # type: ignore[arg-type]


@pytest.fixture
async def session():
    s = aiohttp.ClientSession()
    yield s
    await s.close()


async def test_a_right_lapsing_between_observe_and_reap_leaves_every_write_unsent(session):
    held = {KEY: True}
    client = GiteaClient(session, BASE + "/", "t0ken")
    snapshot = Snapshot(0.0, "x", observation=Observation(queued=(), runners=(IDLE,)))

    async def observe(namespace: str, spec: Any, newer_than: float) -> Any:
        held[KEY] = False  # the domain was given away while Gitea answered
        return snapshot, GiteaHandle(client, REPO)

    reaper, cluster = reaper_over_cluster()
    poller = GroupPoller(
        KEY,
        parse_spec(VALID),
        observe,
        lambda key: None,
        (ReapStep(reaper),),
        right=held.__getitem__,
    )
    poller.submit(ReapOrder(GROUP, (CANDIDATE,)))
    with aioresponses() as mocked:
        gitea_answers(mocked)
        poller.start()
        for _ in range(100):
            await asyncio.sleep(0.01)
            if poller.observations:
                break
        await asyncio.sleep(0.05)
        await poller.stop()
        await reaper.close()
    assert poller.observations >= 1
    assert writes(mocked) == []
    assert cluster.deleted == [] and "ci-h-jobxx" in cluster.jobs


async def test_a_right_lapsing_mid_reap_stops_the_writes_that_follow(session):
    """The reap began with the right; it lapses once the runner is disabled: neither the
    Job nor the registration is deleted, and the task does not re-enable it either (the new
    owner decides about a runner that now takes no job)."""
    held = {KEY: True}
    client = GiteaClient(session, BASE + "/", "t0ken")
    reaper, cluster = reaper_over_cluster()
    snapshot = Snapshot(0.0, "x", observation=Observation(queued=(), runners=(IDLE,)))
    with aioresponses() as mocked:
        gitea_answers(mocked, on_disable=lambda: held.__setitem__(KEY, False))
        run = reaper.run(KEY, GiteaHandle(client, REPO), snapshot, ReapOrder(GROUP, (CANDIDATE,)))
        with fence.fenced_by(lambda: held[KEY]), pytest.raises(fence.Fenced):
            await run
        await reaper.close()
    assert [w.split(" ")[0] for w in writes(mocked)] == ["PATCH"]  # the disable only
    assert cluster.deleted == []


async def test_the_api_server_write_path_refuses_without_the_right():
    sent: list[str] = []

    async def request() -> FakeResponse:
        sent.append("sent")
        return FakeResponse(200)

    with fence.fenced_by(lambda: False), pytest.raises(fence.Fenced):
        await write(TokenBucket(qps=100, burst=100), "team-a", request)
    with fence.fenced_by(lambda: True):
        await write(TokenBucket(qps=100, burst=100), "team-a", request)
    await write(TokenBucket(qps=100, burst=100), "team-a", request)  # no right set: one replica
    assert sent == ["sent", "sent"]


async def test_gitea_reads_go_without_the_right_and_writes_do_not(session):
    client = GiteaClient(session, BASE + "/", "t0ken")
    with aioresponses() as mocked:
        gitea_answers(mocked)
        with fence.fenced_by(lambda: False):
            assert (await client.get_runner(REPO, 7)) is not None
            with pytest.raises(fence.Fenced):
                await client.delete_runner(REPO, 7)
    assert writes(mocked) == []
