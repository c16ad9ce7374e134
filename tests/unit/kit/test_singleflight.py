import asyncio

import pytest

from gitea_runner_operator.kit.singleflight import SingleFlight


async def test_callers_of_one_key_share_one_call_and_the_next_caller_starts_anew():
    flights: SingleFlight[str, int] = SingleFlight()
    calls = []
    gate = asyncio.Event()

    async def call() -> int:
        calls.append(1)
        await gate.wait()
        return len(calls)

    waiters = [asyncio.create_task(flights.run("a", call)) for _ in range(5)]
    await asyncio.sleep(0)
    gate.set()
    assert await asyncio.gather(*waiters) == [1] * 5
    await asyncio.sleep(0)  # the ended call is let go
    assert "a" not in flights
    assert await flights.run("a", call) == 2


async def test_a_waiter_that_gives_up_does_not_cancel_the_others_call():
    flights: SingleFlight[str, str] = SingleFlight()
    gate = asyncio.Event()

    async def call() -> str:
        await gate.wait()
        return "answer"

    leaving = asyncio.create_task(flights.run("a", call))
    staying = asyncio.create_task(flights.run("a", call))
    await asyncio.sleep(0)
    leaving.cancel()
    gate.set()
    assert await staying == "answer"
    with pytest.raises(asyncio.CancelledError):
        await leaving


async def test_a_forgotten_call_still_answers_but_its_settle_hook_does_not_run():
    flights: SingleFlight[str, str] = SingleFlight()
    gate = asyncio.Event()
    settled: list[str] = []

    async def call() -> str:
        await gate.wait()
        raise RuntimeError("refused")

    waiter = asyncio.create_task(flights.run("a", call, settled=lambda: settled.append("a")))
    await asyncio.sleep(0)
    flights.forget("a")
    assert "a" not in flights
    gate.set()
    with pytest.raises(RuntimeError):
        await waiter
    await asyncio.sleep(0)
    assert settled == []
