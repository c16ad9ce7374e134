import asyncio

import pytest

from gitea_runner_operator.runtime.workqueue import ExponentialBackoff, ShutDown, WorkQueue


async def test_a_key_is_queued_once_however_many_events_arrive():
    q: WorkQueue[str] = WorkQueue()
    for _ in range(5):
        q.add("ns/a")
    q.add("ns/b")
    assert len(q) == 2
    assert await q.get() == "ns/a"
    assert await q.get() == "ns/b"


async def test_a_key_being_processed_is_not_handed_out_twice_and_runs_once_more():
    q: WorkQueue[str] = WorkQueue()
    q.add("k")
    key = await q.get()
    q.add("k")  # event while processing
    q.add("k")
    assert len(q) == 0  # not given to a second worker
    second = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    assert not second.done()
    q.done(key)  # now exactly one more pass
    assert await asyncio.wait_for(second, 1) == "k"
    q.done("k")
    assert len(q) == 0


async def test_add_after_keeps_the_earlier_deadline():
    q: WorkQueue[str] = WorkQueue()
    q.add_after("k", 0.05)
    q.add_after("k", 5)
    got = await asyncio.wait_for(q.get(), 1)
    assert got == "k"


async def test_rate_limited_requeues_back_off_per_key_and_forget_resets():
    limiter: ExponentialBackoff[str] = ExponentialBackoff(base=1, cap=8)
    assert [limiter.when("a") for _ in range(5)] == [1, 2, 4, 8, 8]
    assert limiter.when("b") == 1  # per key
    limiter.forget("a")
    assert limiter.when("a") == 1


async def test_shutdown_releases_idle_workers():
    q: WorkQueue[str] = WorkQueue()
    waiter = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.shut_down()
    with pytest.raises(ShutDown):
        await asyncio.wait_for(waiter, 1)
    q.add("late")
    assert len(q) == 0
