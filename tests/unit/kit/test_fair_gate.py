"""The fair gate (kit/fair_gate.py): one key holds at most its places, freed places go round
the waiting keys, and a waiter that gives up leaves nothing behind."""

from __future__ import annotations

import asyncio

import pytest

from gitea_runner_operator.kit.fair_gate import FairGate


async def _hold(gate: FairGate[str], key: str, release: asyncio.Event, order: list[str]) -> None:
    async with gate.turn(key):
        order.append(key)
        await release.wait()


async def test_one_key_holds_at_most_its_places_and_another_key_enters_at_once() -> None:
    gate: FairGate[str] = FairGate(slots=64, per_key=4)
    release, order = asyncio.Event(), []
    busy = [asyncio.create_task(_hold(gate, "many", release, order)) for _ in range(40)]
    await asyncio.sleep(0)
    assert gate.held == {"many": 4}
    other = asyncio.create_task(_hold(gate, "one", release, order))
    await asyncio.sleep(0)
    assert order.count("one") == 1  # not behind the 36 that wait
    release.set()
    await asyncio.gather(*busy, other)
    assert order.count("many") == 40
    assert gate.most_held == 4
    assert gate.held == {}  # nothing kept of a key that holds nothing


async def test_a_freed_place_goes_to_the_next_key_in_turn_not_to_the_first_to_arrive() -> None:
    gate: FairGate[str] = FairGate(slots=1, per_key=1)
    order: list[str] = []
    releases = {name: asyncio.Event() for name in ("first", "a1", "a2", "a3", "b1")}

    async def hold(name: str, key: str) -> None:
        async with gate.turn(key):
            order.append(name)
            await releases[name].wait()

    tasks = [asyncio.create_task(hold("first", "a"))]
    for name, key in (("a1", "a"), ("a2", "a"), ("a3", "a"), ("b1", "b")):
        tasks.append(asyncio.create_task(hold(name, key)))
    await asyncio.sleep(0)
    for name in ("first", "a1", "b1", "a2", "a3"):
        releases[name].set()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert order == ["first", "a1", "b1", "a2", "a3"]


async def test_a_waiter_that_gives_up_leaves_no_place_taken() -> None:
    gate: FairGate[str] = FairGate(slots=2, per_key=1)
    release, order = asyncio.Event(), []
    holder = asyncio.create_task(_hold(gate, "a", release, order))
    waiter = asyncio.create_task(_hold(gate, "a", release, order))
    await asyncio.sleep(0)
    waiter.cancel()
    release.set()
    await holder
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert gate.held == {}
    assert order == ["a"]
    async with gate.turn("a"):  # and the key is served again
        assert gate.held == {"a": 1}


async def test_a_waiter_cancelled_as_its_place_is_handed_to_it_gives_the_place_on() -> None:
    gate: FairGate[str] = FairGate(slots=1, per_key=1)
    release, order = asyncio.Event(), []
    holder = asyncio.create_task(_hold(gate, "a", release, order))
    waiter = asyncio.create_task(_hold(gate, "b", release, order))
    third = asyncio.create_task(_hold(gate, "c", release, order))
    await asyncio.sleep(0)
    release.set()
    await asyncio.sleep(0)  # the holder leaves and hands its place to "b"...
    assert gate.held == {"b": 1}
    waiter.cancel()  # ...which is cancelled before it runs
    await asyncio.gather(holder, third, waiter, return_exceptions=True)
    assert order == ["a", "c"]
    assert gate.held == {}


def test_slots_and_places_are_at_least_one() -> None:
    with pytest.raises(ValueError):
        FairGate(slots=0, per_key=1)
    with pytest.raises(ValueError):
        FairGate(slots=1, per_key=0)
