"""The turnstile (kit/turnstile.py): heavy steps one per turn of the loop, each after the I/O
that arrived while the one before ran; a lone step never waits; nothing wedges it."""

from __future__ import annotations

import asyncio
import itertools
import socket
import time

from gitea_runner_operator.kit.turnstile import REST, Turnstile


async def _order_of(heavy_steps: int, stile: Turnstile | None) -> list[str]:
    """Each heavy step makes an answer arrive (a byte on a socket) while it runs; the order
    in which the loop then ran the heavy steps and the answers' reads."""
    loop = asyncio.get_running_loop()
    order: list[str] = []
    ours, theirs = socket.socketpair()
    ours.setblocking(False)

    def read() -> None:
        ours.recv(64)
        order.append("answer read")

    loop.add_reader(ours.fileno(), read)

    async def heavy() -> None:
        if stile is not None:
            await stile.turn()
        order.append("heavy")
        theirs.send(b"x")  # an answer for another tenant arrives meanwhile

    try:
        await asyncio.gather(*(heavy() for _ in range(heavy_steps)))
        for _ in range(5):
            await asyncio.sleep(0)
    finally:
        loop.remove_reader(ours.fileno())
        ours.close()
        theirs.close()
    return order


async def test_an_answer_that_arrives_during_a_heavy_step_is_read_before_the_next() -> None:
    order = await _order_of(12, Turnstile())
    assert order == ["heavy", "answer read"] * 12


async def test_without_it_every_heavy_step_in_flight_runs_before_the_answer_is_read() -> None:
    """What the turnstile is for: twelve hostile pages ahead of another tenant's answer."""
    order = await _order_of(12, None)
    assert order[:12] == ["heavy"] * 12


async def test_a_lone_heavy_step_passes_at_once() -> None:
    stile = Turnstile()
    for _ in range(3):
        await stile.turn()
        await asyncio.sleep(0.01)  # the next comes after the rest (twice a step of ~0 ms)
    assert stile.waited == 0


async def test_a_cancelled_waiter_does_not_hold_the_others_up() -> None:
    stile = Turnstile()
    await stile.turn()
    gone = asyncio.create_task(stile.turn())
    passed: list[int] = []

    async def after() -> None:
        await stile.turn()
        passed.append(1)

    waiting = asyncio.create_task(after())
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.wait_for(waiting, 1.0)
    assert passed == [1]


def test_a_loop_that_ended_mid_turn_leaves_the_next_loop_an_open_turnstile() -> None:
    stile = Turnstile()

    async def one_step() -> None:
        await stile.turn()  # the loop ends before the turnstile opens again

    asyncio.run(one_step())
    asyncio.run(asyncio.wait_for(stile.turn(), 1.0))
    assert stile.waited == 0


async def test_after_a_heavy_step_the_next_waits_twice_its_time() -> None:
    """A runner create takes ten or so turns of the loop; with a heavy page parsed in each it
    took 50-90 ms under attack. Heavy steps take at most a third of the loop's time."""
    stile = Turnstile()
    loop = asyncio.get_running_loop()
    passed: list[float] = []

    async def heavy() -> None:
        await stile.turn()
        passed.append(loop.time())
        time.sleep(0.02)  # noqa: ASYNC251 - a page of 20 ms, holding the loop as a parse does

    await asyncio.gather(heavy(), heavy(), heavy())
    gaps = [b - a for a, b in itertools.pairwise(passed)]
    assert all(gap >= 0.02 * (1 + REST) for gap in gaps), gaps
