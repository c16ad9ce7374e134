"""Fewer writes, and an API server that pushes back: Events aggregated per group and reason,
and a 429 (API Priority and Fairness) that slows every write without losing a decision."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gitea_runner_operator.kube import http as http_module
from gitea_runner_operator.kube.cluster import Cluster
from gitea_runner_operator.kube.events import EventRecorder
from gitea_runner_operator.kube.http import Throttled
from gitea_runner_operator.kube.ratelimit import TokenBucket
from tests.support.api_response import FakeResponse
from tests.support.clock import FakeTime
from tests.support.fake_cluster import KEY, Clock, FakeCluster, make, snapshot


class FakeBatch:
    """The Jobs API of a server that answers 429 ``busy`` times, then creates."""

    def __init__(self, busy: int, retry_after: str = "2") -> None:
        self.busy, self.retry_after, self.calls = busy, retry_after, 0

    async def create_namespaced_job(self, namespace: str, manifest: Any, **_: Any) -> Any:
        self.calls += 1
        if self.calls <= self.busy:
            return FakeResponse(429, b'{"message": "too many requests"}', {"Retry-After": "2"})
        return FakeResponse(201, b'{"metadata": {"name": "%s"}}' % manifest["name"].encode())


def _cluster(busy: int) -> tuple[Cluster, FakeBatch, FakeTime, TokenBucket]:
    time_ = FakeTime()
    bucket = TokenBucket(qps=10, burst=5, clock=time_, sleep=time_.sleep)
    cluster = Cluster(object(), limiter=bucket)  # type: ignore[arg-type]
    batch = FakeBatch(busy)
    cluster._batch = batch
    return cluster, batch, time_, bucket


async def test_a_429_pauses_every_write_for_retry_after_then_the_write_goes_through():
    cluster, batch, time_, bucket = _cluster(busy=1)
    name = await cluster.create_job({"metadata": {"namespace": "ns"}, "name": "runner-1"})
    assert name == "runner-1" and batch.calls == 2
    assert time_.now >= 2.0  # the server's Retry-After was waited out
    before = time_.now
    await bucket.acquire("another-namespace")  # the pause was for everyone, now over
    assert time_.now - before < 0.2


async def test_a_server_that_keeps_answering_429_gets_a_definite_no():
    cluster, batch, time_, _ = _cluster(busy=100)
    with pytest.raises(Throttled):
        await cluster.create_job({"metadata": {"namespace": "ns"}, "name": "runner-1"})
    assert batch.calls == http_module.THROTTLE_ATTEMPTS
    assert time_.now >= 2.0 * (http_module.THROTTLE_ATTEMPTS - 1)


class ThrottledCluster(FakeCluster):
    def __init__(self) -> None:
        super().__init__()
        self.throttle = True

    async def create_job(self, manifest: dict[str, Any]) -> str:
        if self.throttle:
            self.creates += 1
            raise Throttled("429")
        return await super().create_job(manifest)


async def test_a_throttled_create_is_made_on_the_next_pass_not_lost_for_the_expectation_timeout():
    """Before: a 429 was an unknown outcome, so the Job stayed expected for 5 minutes and
    the job it was for waited that long. The server said no: the next pass creates it."""
    cluster = ThrottledCluster()
    reconciler, _, _ = make(cluster, snapshot(queued=1))
    with pytest.raises(Throttled):  # the worker retries the key with back-off
        await reconciler.reconcile(KEY)
    assert cluster.all_created == 0
    cluster.throttle = False
    await reconciler.reconcile(KEY)
    assert cluster.all_created == 1
    assert ("Warning", "JobCreateRefused") not in cluster.events  # not the group's fault


class Sink:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.patched: list[tuple[str, dict[str, Any]]] = []
        self.fail = False

    async def create(self, namespace: str, event: dict[str, Any]) -> bool:
        self.created.append(event)
        return not self.fail

    async def patch(self, namespace: str, name: str, patch: dict[str, Any]) -> bool:
        self.patched.append((name, patch))
        return not self.fail


def _event(reason: str, message: str, uid: str = "u1") -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns"},
        "involvedObject": {"name": "ci", "namespace": "ns", "uid": uid},
        "type": "Normal",
        "reason": reason,
        "message": message,
    }


async def test_repeated_events_update_one_event_at_most_once_per_window():
    sink = Sink()
    recorder = EventRecorder(sink.create, sink.patch, flush_every=0.05)
    for i in range(5):
        await recorder.record(_event("RunnersCreated", f"Created {i + 1}"))
    await recorder.record(_event("JobCreateRefused", "quota"))
    await recorder.record(_event("RunnersCreated", "other group", uid="u2"))
    await asyncio.sleep(0)  # the first ones are written by tasks of their own
    # The first of each (group, reason) at once; nothing else yet.
    assert [e["message"] for e in sink.created] == ["Created 1", "quota", "other group"]
    assert sink.created[0]["count"] == 1 and sink.patched == []
    await asyncio.sleep(0.1)
    # The four repeats: one patch of the same Event, with the count and the latest message.
    ((name, patch),) = sink.patched
    assert name == sink.created[0]["metadata"]["name"]
    assert (patch["count"], patch["message"]) == (5, "Created 5")


async def test_held_events_are_bounded_and_a_failed_write_starts_afresh():
    sink = Sink()
    recorder = EventRecorder(sink.create, sink.patch, flush_every=60, max_keys=2)
    for uid in ("a", "b", "c", "d"):
        await recorder.record(_event("RunnersCreated", "x", uid=uid))
    await asyncio.sleep(0)
    assert len(recorder) == 2 and len(sink.created) == 4  # past the bound: written, not held
    sink.fail = True
    await recorder.record(_event("Fails", "y", uid="e"))
    await asyncio.sleep(0)
    assert len(recorder) == 2
    await recorder.close()


async def test_an_event_is_reused_only_within_its_window_then_created_again():
    now = [0.0]
    sink = Sink()
    recorder = EventRecorder(
        sink.create, sink.patch, flush_every=0.01, reuse_for=100, clock=lambda: now[0]
    )
    await recorder.record(_event("RunnersCreated", "1"))
    now[0] = 200.0
    await recorder.record(_event("RunnersCreated", "2"))
    await asyncio.sleep(0)
    assert len(sink.created) == 2 and sink.patched == []
    await recorder.close()


async def test_a_pass_does_not_wait_for_its_first_event_to_be_written():
    gate = asyncio.Event()
    written: list[str] = []

    async def slow_create(namespace: str, event: dict[str, Any]) -> bool:
        await gate.wait()  # an API server that takes its time
        written.append(event["reason"])
        return True

    recorder = EventRecorder(slow_create, Sink().patch)
    done, _ = await asyncio.wait(
        [asyncio.ensure_future(recorder.record(_event("A", "x")))], timeout=5
    )
    assert done and written == []  # recorded, being written
    gate.set()
    await recorder.close()
    assert written == ["A"]


async def test_first_events_under_way_are_bounded_then_the_pass_waits_for_its_own():
    """An API server that never answers Events: at most ``max_in_flight`` first creates run
    in the background; the next pass writes its Event itself (and waits), so tasks cannot
    pile up with the write rate; a stop ends them all within its grace."""
    gate = asyncio.Event()
    started: list[str] = []

    async def stuck_create(namespace: str, event: dict[str, Any]) -> bool:
        started.append(event["involvedObject"]["uid"])
        await gate.wait()
        return True

    recorder = EventRecorder(stuck_create, Sink().patch, max_in_flight=3)
    for uid in ("a", "b", "c"):
        await asyncio.wait_for(recorder.record(_event("RunnersCreated", "x", uid=uid)), 1)
    fourth = asyncio.ensure_future(recorder.record(_event("RunnersCreated", "x", uid="d")))
    await asyncio.sleep(0.05)
    assert started == ["a", "b", "c", "d"] and not fourth.done()  # the fourth pass waits
    gate.set()
    await asyncio.wait_for(fourth, 1)
    gate.clear()
    for uid in ("e", "f", "g"):
        await recorder.record(_event("RunnersCreated", "x", uid=uid))
    await asyncio.wait_for(recorder.close(grace=0.05), 1)


class CountingCluster(FakeCluster):
    def __init__(self) -> None:
        super().__init__()
        self.status_patches = 0

    async def patch_group_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.status_patches += 1
        await super().patch_group_status(namespace, name, status)


async def test_status_is_patched_at_most_once_a_second_and_the_last_change_is_not_lost():
    cluster = CountingCluster()
    clock = Clock()
    reconciler, sources, _ = make(cluster, snapshot(queued=1), clock=clock)
    await reconciler.reconcile(KEY)
    assert cluster.status_patches == 1
    cluster.sync()
    for queued in (2, 3):  # two more passes within the second, each changing the status
        clock.now += 0.2
        sources.source.latest = snapshot(queued=queued)
        result = await reconciler.reconcile(KEY)
        assert cluster.status_patches == 1
        assert result.requeue_after is not None and result.requeue_after <= 1.0
    clock.now += result.requeue_after  # the pass the reconcile asked for
    await reconciler.reconcile(KEY)
    assert cluster.status_patches == 2
    assert cluster.status is not None and cluster.status["queuedJobs"] == 3


async def test_a_namespaces_runner_creates_take_its_next_tokens_before_writes_that_report():
    time_ = FakeTime()
    bucket = TokenBucket(qps=10, burst=1, clock=time_, sleep=time_.sleep)
    await bucket.acquire("a")  # the burst is spent: everyone below waits
    served: list[str] = []

    async def write(name: str, key: str, urgent: bool = False) -> None:
        await bucket.acquire(key, urgent=urgent)
        served.append(name)

    tasks = [asyncio.create_task(write(f"status {i}", "a")) for i in range(3)]
    await asyncio.sleep(0)
    tasks += [asyncio.create_task(write(f"create {i}", "a", True)) for i in range(2)]
    await asyncio.gather(*tasks)
    # The first status write had its token before the creates asked; the creates that
    # came later are still served before the namespace's other status writes. (Across
    # namespaces turns go round: test_ratelimit.py.)
    assert served == ["status 0", "create 0", "create 1", "status 1", "status 2"]


async def test_a_write_that_gets_no_token_in_time_is_a_definite_no_never_sent():
    """Every wait for a write token has a deadline: past it the write is not sent, and the
    caller hears Throttled (a create is then not expected and is made on a later pass)."""
    bucket = TokenBucket(qps=1, burst=1, deadline=0.05)
    await bucket.acquire("busy")  # the bucket is empty for a second
    sent: list[str] = []

    async def request() -> Any:
        sent.append("create")
        return FakeResponse(201, b"{}")

    with pytest.raises(Throttled, match="no write token"):
        await asyncio.wait_for(http_module.write(bucket, "quiet", request, urgent=True), 1)
    assert sent == []
