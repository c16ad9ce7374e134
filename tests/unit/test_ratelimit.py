"""The client-side write limit: a burst goes through at once, then writes are paced."""

import asyncio

import pytest

from gitea_runner_operator.kube.ratelimit import TokenBucket


async def test_a_burst_passes_then_writes_are_paced_at_qps():
    bucket = TokenBucket(qps=100, burst=5)
    loop = asyncio.get_running_loop()
    start = loop.time()
    for _ in range(5):
        await bucket.acquire()
    assert bucket.waited == 0
    for _ in range(5):
        await bucket.acquire()
    assert bucket.waited == pytest.approx(0.05, abs=0.02)  # 5 more at 100/s
    assert loop.time() - start >= 0.04


def test_nonsense_limits_are_refused():
    with pytest.raises(ValueError):
        TokenBucket(qps=0, burst=1)
