"""A pass hands its runner creates and marks to its group's writer and returns: it holds its
group for its reads and decisions, not for the API server's answers
(reconcile/steps/runner_writes.py). With the real Reconciler over a cluster whose creates and
annotations wait until the test lets the API server answer.

In the platform's burst of issue 45 the API server took 0.3 to 3 s to answer one create or
one annotation, and every pass that awaited one held its group that long: reconcile p99 2.2
to 3.4 s."""

from __future__ import annotations

import asyncio
from typing import Any

from gitea_runner_operator.api.gitea import ActionRunner
from gitea_runner_operator.kit import fence
from gitea_runner_operator.metrics import Metrics
from tests.support.builders import VALID
from tests.support.fake_cluster import (
    KEY,
    Clock,
    FakeCache,
    FakeCluster,
    FakeSources,
    fresh_reconciler,
    make,
    runner_pod,
    snapshot,
)

WRITES = "gitea_runner_operator_runner_writes_duration_seconds_count"


class SlowApiServer(FakeCluster):
    """Runner creates and annotations wait for ``answer``: an API server busy with a burst."""

    def __init__(self) -> None:
        super().__init__(watch="lagging")
        self.answer = asyncio.Event()
        self.asked = 0  # creates and annotations sent

    async def create_job(self, manifest: dict[str, Any]) -> str:
        self.asked += 1
        await self.answer.wait()
        return await super().create_job(manifest)

    async def annotate_job(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        self.asked += 1
        await self.answer.wait()
        await super().annotate_job(namespace, name, annotations)

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        self.asked += 1
        await self.answer.wait()
        await super().annotate_pod(namespace, name, annotations)


class Queue:
    """The work queue, as the writer gives groups back to it."""

    def __init__(self) -> None:
        self.added: list[str] = []
        self.retried: list[str] = []

    def add(self, key: str) -> None:
        self.added.append(key)

    def add_rate_limited(self, key: str) -> None:
        self.retried.append(key)


def _world(
    cluster: FakeCluster, queued: int, clock: Clock | None = None
) -> tuple[Any, FakeSources, Queue, Metrics]:
    queue, metrics = Queue(), Metrics()
    sources = FakeSources(snapshot(queued=queued))
    cache = FakeCache(cluster, {**VALID, "maxActiveRunners": 5})
    rec = fresh_reconciler(cache, cluster, sources, clock or Clock(), lambda: 1767225630.0,
                           queue=queue, metrics=metrics)  # fmt: skip
    return rec, sources, queue, metrics


async def _returns(coro: Any) -> bool:
    """Whether the pass returns while the API server has not answered (bounded: a pass that
    awaits the answer never returns here)."""
    task = asyncio.ensure_future(coro)
    done, _ = await asyncio.wait([task], timeout=5)
    if not done:
        task.cancel()
    return bool(done)


async def _answered() -> None:
    """Let the writer take the API server's answers."""
    for _ in range(50):
        await asyncio.sleep(0)


def _count(metrics: Metrics, kind: str) -> float:
    return metrics.registry.get_sample_value(WRITES, {"kind": kind}) or 0.0


async def test_a_pass_returns_before_the_api_server_answers_its_creates():
    cluster = SlowApiServer()
    rec, sources, queue, metrics = _world(cluster, queued=2)
    assert await _returns(rec.reconcile(KEY))
    assert cluster.all_created == 0 and cluster.asked == 1  # the first of the slow start
    # A third job comes while those creates wait: the pass counts the two on their way and
    # creates nothing while its group's writes are under way.
    sources.source.latest = snapshot(queued=3, started_at=2.0)
    assert await _returns(rec.reconcile(KEY))
    assert cluster.asked == 1
    cluster.answer.set()
    await _answered()
    assert cluster.all_created == 2
    assert queue.added == [KEY]  # given back for the pass that wrote nothing
    assert await _returns(rec.reconcile(KEY))  # that pass, again
    await rec.close()
    assert cluster.all_created == 3  # one runner Job per job, none twice
    assert _count(metrics, "create") == 2


async def test_a_pass_returns_before_the_api_server_answers_its_marks():
    cluster = SlowApiServer()
    cluster.answer.set()
    first, _, _ = make(cluster, snapshot(queued=1))
    await first.reconcile(KEY)
    cluster.sync()
    (job,) = cluster.jobs
    cluster.pods = [runner_pod(job, f"{job}-a")]
    cluster.answer.clear()
    rec, sources, queue, metrics = _world(cluster, queued=0)
    busy = ActionRunner(id=1, name=f"{job}-a", busy=True)
    sources.source.latest = snapshot(queued=0, runners=(busy,))
    assert await _returns(rec.reconcile(KEY))
    took = "gitea.bpg.pw/took-job"
    assert took not in cluster.jobs[job]["metadata"]["annotations"]  # not answered yet
    cluster.answer.set()
    await rec.close()
    assert cluster.jobs[job]["metadata"]["annotations"][took] == "true"
    assert cluster.pods[0]["metadata"]["annotations"]  # the scale-down guard
    assert _count(metrics, "mark") == 1 and queue.added == queue.retried == []


async def _refused(queued: int) -> tuple[Any, SlowApiServer, Queue, Clock]:
    """A group's first pass, whose creates the API server refuses (a quota), answered."""
    cluster = SlowApiServer()
    cluster.answer.set()
    cluster.refuse = 'jobs "x" is forbidden: exceeded quota'
    clock = Clock()
    rec, _, queue, _ = _world(cluster, queued=queued, clock=clock)
    await rec.reconcile(KEY)
    await _answered()
    return rec, cluster, queue, clock


async def test_a_create_refused_after_the_pass_is_reported_by_the_group_given_back():
    rec, cluster, queue, clock = await _refused(queued=2)
    assert queue.added == [KEY]  # to report the refusal, not wait for the next poll
    clock.now += 2  # past the status writes' interval
    await rec.reconcile(KEY)
    assert cluster.status is not None
    (healthy,) = [c for c in cluster.status["conditions"] if c["type"] == "RunnersHealthy"]
    assert healthy["status"] == "False" and "exceeded quota" in healthy["message"]
    await rec.close()


async def test_a_create_without_an_answer_gives_the_group_back_with_back_off_then_settles():
    cluster = SlowApiServer()
    cluster.answer.set()
    cluster.drop_creates = 2  # the create and its second try lose their connection
    rec, _, queue, _ = _world(cluster, queued=1)
    await rec.reconcile(KEY)
    await _answered()
    assert queue.retried == [KEY] and cluster.all_created == 0
    await rec.reconcile(KEY)  # the retry sends the same name again
    await rec.close()
    assert cluster.all_created == 1


async def test_a_group_that_goes_cancels_its_writes_under_way():
    cluster = SlowApiServer()
    rec, _, _, _ = _world(cluster, queued=2)
    await rec.reconcile(KEY)
    await rec.memory.gone(KEY)  # deleted, or handed to another replica
    cluster.answer.set()
    await _answered()
    assert cluster.all_created == 0
    await rec.close()


class FencedApiServer(FakeCluster):
    """--sharding: the group's domain moved on before the create left (kit/fence.py)."""

    async def create_job(self, manifest: dict[str, Any]) -> str:
        raise fence.Fenced("write in team-a")


async def test_a_create_cut_by_the_fence_is_left_to_the_new_owner():
    cluster = FencedApiServer()
    rec, _, queue, _ = _world(cluster, queued=1)
    await rec.reconcile(KEY)
    await rec.close()
    assert cluster.all_created == 0
    assert queue.added == queue.retried == []  # not this replica's group any more


async def test_a_hand_over_waits_for_a_create_already_sent_to_be_answered():
    # --sharding: the next owner lists the group's Jobs once this replica has let go; a create
    # sent before and answered after would be missing from that list, and made again there.
    cluster = SlowApiServer()
    rec, _, _, _ = _world(cluster, queued=1)
    await rec.reconcile(KEY)
    await _answered()
    assert cluster.asked == 1 and cluster.all_created == 0  # sent, not answered
    handing = asyncio.ensure_future(rec.writes.finish(frozenset({KEY})))
    await _answered()
    assert not handing.done()  # the hand-over waits for the answer
    cluster.answer.set()
    await asyncio.wait_for(handing, 5)
    assert cluster.all_created == 1
    await rec.close()


async def test_a_refused_create_waits_out_its_back_off_and_the_status_says_held_back():
    # The writer gives the group back at once to report a refusal: a pass that created again
    # made that a loop of refused creates, and each showed the job as a starting runner.
    rec, cluster, queue, clock = await _refused(queued=1)
    assert cluster.asked == 1 and queue.added == [KEY]
    for _ in range(3):  # the passes the refusal and the status writes bring, within back-off
        clock.now += 0.5
        await rec.reconcile(KEY)
        await _answered()
    assert cluster.asked == 1  # not sent again before the back-off ends
    waiting = cluster.status["waiting"]
    assert waiting["heldBack"]["count"] == 1 and waiting["startingRunner"] == 0
    await rec.close()
