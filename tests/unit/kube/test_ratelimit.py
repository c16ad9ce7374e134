"""The client-side write limit: a burst goes through at once, then writes are paced."""

import asyncio

import pytest

from gitea_runner_operator.kube.ratelimit import NoWriteToken, TokenBucket
from tests.support.clock import FakeTime


async def test_a_burst_passes_then_writes_are_paced_at_qps():
    time_ = FakeTime()
    bucket = TokenBucket(qps=100, burst=5, clock=time_, sleep=time_.sleep)
    for _ in range(5):
        await bucket.acquire()
    assert bucket.waited == 0 and time_.now == 0
    for _ in range(5):
        await bucket.acquire()
    assert bucket.waited == pytest.approx(0.05)  # 5 more at 100/s
    assert time_.now == pytest.approx(0.05)


def test_nonsense_limits_are_refused():
    with pytest.raises(ValueError):
        TokenBucket(qps=0, burst=1)


async def test_one_namespaces_burst_delays_anothers_first_write_by_about_one_token():
    """One group creating 1,000 runners, another getting one job: first come, first served
    would make the second wait for the whole burst (100 s at 10 writes/s)."""
    time_ = FakeTime()
    bucket = TokenBucket(qps=10, burst=10, clock=time_, sleep=time_.sleep)
    done: dict[str, float] = {}

    async def write(key: str, i: int) -> None:
        await bucket.acquire(key)
        done[f"{key}{i}"] = time_.now

    burst = [asyncio.create_task(write("busy", i)) for i in range(1000)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    second = asyncio.create_task(write("quiet", 0))
    await asyncio.gather(*burst, second)
    assert done["quiet0"] <= 0.5  # a few tokens at 10/s, not the 100 s of the whole burst
    # Everything still goes at the configured rate: 1,001 writes, 10 at once, then 10/s.
    assert max(done.values()) == pytest.approx((1001 - 10) / 10, abs=0.2)
    assert len(done) == 1001


async def test_turns_go_round_robin_across_waiting_namespaces():
    time_ = FakeTime()
    bucket = TokenBucket(qps=1, burst=1, clock=time_, sleep=time_.sleep)
    order: list[str] = []

    async def write(key: str) -> None:
        await bucket.acquire(key)
        order.append(key)

    await bucket.acquire("x")  # empties the bucket: everyone below waits
    tasks = [asyncio.create_task(write(k)) for k in ("a", "a", "a", "b", "b", "c")]
    await asyncio.gather(*tasks)
    assert order == ["a", "b", "c", "a", "b", "a"]


async def test_a_cancelled_waiter_neither_loses_nor_wedges_the_queue():
    bucket = TokenBucket(qps=20, burst=1)  # real time: 50 ms a token
    await bucket.acquire("x")
    first = asyncio.create_task(bucket.acquire("a"))  # becomes the pacer, sleeping
    await asyncio.sleep(0.01)
    others = [asyncio.create_task(bucket.acquire(k)) for k in ("b", "c")]
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(asyncio.gather(*others), timeout=5)
    await asyncio.wait_for(bucket.acquire("d"), timeout=5)


async def test_one_tenants_creates_do_not_hold_back_another_tenants_other_writes():
    """One group's pass creates 2,000 runner Jobs; another team's safe-to-evict mark (or a
    delete, a status patch, a finalizer release) waits about one token, not for every
    create (before: creates of any tenant went first, and such a mark waited 17.5 s)."""
    time_ = FakeTime()
    bucket = TokenBucket(qps=100, burst=1, clock=time_, sleep=time_.sleep)
    await bucket.acquire("busy")  # the burst is spent: everyone below waits
    done: dict[str, float] = {}

    async def write(name: str, key: str, urgent: bool) -> None:
        await bucket.acquire(key, urgent=urgent)
        done[name] = time_.now

    creates = [asyncio.create_task(write(f"create {i}", "busy", True)) for i in range(2000)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    mark = asyncio.create_task(write("mark", "quiet", False))
    own = asyncio.create_task(write("own status", "busy", False))
    await asyncio.gather(*creates, mark, own)
    assert done["mark"] <= 0.05  # a few tokens at 100/s
    # Within its own namespace a tenant's creates still go before what only reports.
    assert done["own status"] >= max(v for k, v in done.items() if k.startswith("create"))


async def test_every_wait_for_a_write_token_has_a_deadline():
    bucket = TokenBucket(qps=2, burst=1, deadline=0.2)  # real time: 500 ms a token
    await bucket.acquire("x")
    waiting = [asyncio.create_task(bucket.acquire(k)) for k in ("a", "b")]
    results = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 2)
    assert all(isinstance(r, NoWriteToken) for r in results)
    await asyncio.sleep(0.6)  # a token again
    await asyncio.wait_for(bucket.acquire("c"), timeout=0.1)  # nothing wedged behind them
