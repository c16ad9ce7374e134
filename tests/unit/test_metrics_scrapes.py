"""``/metrics`` cannot be used to stall the loop: however many clients scrape, the body is
rendered at most once per interval, by one render that concurrent scrapes share, in a
thread; the loop's share of a scrape is handing out the last body."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from gitea_runner_operator.health import HealthServer
from gitea_runner_operator.metrics import Metrics
from gitea_runner_operator.runtime.loopwatch import LoopWatch
from tests.testbed.sandbox import free_port

GROUPS = 1000
SCRAPERS = 16


def many_groups() -> Metrics:
    metrics = Metrics()
    for i in range(GROUPS):
        ns, name = f"team-{i % 50}", f"group-{i}"
        metrics.group_observed(
            ns, name, queued=i % 7, starting=1, idle=2, busy=3, desired=6, max_active=10,
            ready=True, failed=0,
        )  # fmt: skip
        metrics.runners_created(ns, name, 3)
        metrics.job_startup_latency(ns, name, 4.2)
    return metrics


async def test_sixteen_scrapers_cost_one_render_per_interval_off_the_loop() -> None:
    metrics = many_groups()
    renders = 0
    render = metrics.render

    def counted() -> bytes:
        nonlocal renders
        renders += 1
        return render()

    metrics.render = counted  # type: ignore[method-assign]
    interval, seconds = 1.0, 3.0
    port = free_port()
    server = HealthServer("127.0.0.1", port, lambda: True, metrics, render_every=interval)
    await server.start()
    bodies: set[bytes] = set()
    try:
        async with LoopWatch(interval=0.02) as watch, aiohttp.ClientSession() as session:
            start = time.monotonic()

            async def scrape() -> int:
                done = 0
                while time.monotonic() - start < seconds:
                    async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
                        assert resp.status == 200
                        bodies.add(await resp.read())
                    done += 1
                return done

            scrapes = sum(await asyncio.gather(*(scrape() for _ in range(SCRAPERS))))
            elapsed = time.monotonic() - start
    finally:
        await server.stop()
    print(
        f"{scrapes} scrapes of {GROUPS} groups by {SCRAPERS} clients in {elapsed:.1f} s: "
        f"{renders} renders, loop lag max {watch.max_lag * 1000:.0f} ms"
    )
    assert renders <= elapsed / interval + 1
    assert scrapes > renders  # the scrapers were answered from a shared body
    assert all(b'runnergroup="group-999"' in body for body in bodies)


async def test_a_scrape_after_the_interval_sees_what_changed() -> None:
    metrics = Metrics()
    port = free_port()
    server = HealthServer("127.0.0.1", port, lambda: True, metrics, render_every=0.2)
    await server.start()
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(url) as resp:
                assert b"group-new" not in await resp.read()
            metrics.runners_created("team", "group-new")
            await asyncio.sleep(0.3)
            async with session.get(url) as resp:
                assert b'runnergroup="group-new"' in await resp.read()
    finally:
        await server.stop()
