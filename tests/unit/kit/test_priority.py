"""Pickups first (kit/priority.py): while a woken group gets its runner, bulk work waits, for
at most a bound each time, and the collector pauses; a pickup's own work never waits."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest

from gitea_runner_operator.kit.priority import Priority


async def _waited(priority: Priority) -> float:
    started = time.monotonic()
    await priority.make_way()
    return time.monotonic() - started


async def test_bulk_work_passes_at_once_when_no_pickup_is_under_way() -> None:
    priority = Priority()
    assert await _waited(priority) < 0.01
    assert priority.made_way == 0


async def test_bulk_work_waits_until_the_woken_groups_pass_has_ended() -> None:
    priority = Priority(window=5, make_way_at_most=5)
    priority.begin("team-a/ci")
    bulk = asyncio.ensure_future(priority.make_way())
    await asyncio.sleep(0.05)
    assert not bulk.done()  # a poll nobody woke waits for the pickup
    priority.passed("team-a/ci", started=time.monotonic())
    await asyncio.wait_for(bulk, 1)
    assert priority.made_way == 1 and not priority.under_way


async def test_a_pass_that_began_before_the_wake_does_not_end_the_pickup() -> None:
    """It read Gitea's answer before the delivery: the woken group's runner is still to come."""
    priority = Priority(window=5, make_way_at_most=5)
    before = time.monotonic() - 1
    priority.begin("team-a/ci")
    priority.passed("team-a/ci", started=before)
    assert priority.under_way
    priority.passed("team-b/ci", started=time.monotonic())  # another group's pass
    assert priority.under_way


async def test_bulk_work_never_waits_longer_than_the_bound_for_any_number_of_pickups() -> None:
    """A tenant's flood of wakes: each of others' requests waits the bound at most."""
    priority = Priority(window=60, make_way_at_most=0.05)
    for k in range(500):
        priority.begin(f"evil/g{k}")
    waits = await asyncio.gather(*(_waited(priority) for _ in range(20)))
    assert max(waits) < 0.5
    assert min(waits) >= 0.04
    assert not priority._waiting  # the waiters that gave up left nothing behind


async def test_a_window_whose_pass_never_comes_closes_by_itself() -> None:
    priority = Priority(window=0.05, make_way_at_most=5)
    priority.begin("team-a/ci")
    assert await _waited(priority) < 0.5
    assert not priority.under_way


async def test_a_pickups_own_work_never_waits() -> None:
    priority = Priority(window=5, make_way_at_most=5)
    priority.begin("team-a/ci")
    with priority.urgent():
        assert await _waited(priority) < 0.01

        async def child() -> float:  # a task it starts (a page fetched beside) is its work
            return await _waited(priority)

        assert await asyncio.create_task(child()) < 0.01
    assert priority.made_way == 0


@pytest.fixture
def gc_enabled() -> object:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


async def test_the_collector_pauses_while_a_pickup_is_under_way(gc_enabled: object) -> None:
    priority = Priority(window=5)
    priority.begin("team-a/ci")
    priority.begin("team-b/ci")
    assert not gc.isenabled()
    priority.passed("team-a/ci", started=time.monotonic())
    assert not gc.isenabled()  # one pickup is still under way
    priority.passed("team-b/ci", started=time.monotonic())
    assert gc.isenabled()


async def test_the_collector_resumes_when_a_window_times_out(gc_enabled: object) -> None:
    priority = Priority(window=0.02)
    priority.begin("team-a/ci")
    await asyncio.sleep(0.1)
    assert gc.isenabled() and not priority.under_way


async def test_a_collector_someone_else_disabled_stays_disabled(gc_enabled: object) -> None:
    gc.disable()
    priority = Priority(window=5)
    priority.begin("team-a/ci")
    priority.passed("team-a/ci", started=time.monotonic())
    assert not gc.isenabled()


def test_a_wake_outside_a_running_loop_opens_nothing() -> None:
    priority = Priority()
    priority.begin("team-a/ci")
    assert not priority.under_way


def test_a_new_loop_forgets_the_last_ones_windows(gc_enabled: object) -> None:
    priority = Priority(window=60)

    async def wake() -> None:
        priority.begin("team-a/ci")

    asyncio.run(wake())  # the loop ends with the window open
    assert priority.under_way

    async def bulk() -> float:
        return await _waited(priority)

    assert asyncio.run(bulk()) < 0.01
    assert gc.isenabled()


async def test_pickups_that_never_stop_leave_the_collector_half_the_time(
    gc_enabled: object,
) -> None:
    """A flood of wakes keeps a window open all along: the collector still runs."""
    priority = Priority(window=0.05, make_way_at_most=0.01)
    enabled = 0
    for k in range(40):
        priority.begin(f"evil/g{k}")
        await asyncio.sleep(0.01)
        enabled += gc.isenabled()
    assert priority.under_way
    assert enabled >= 15  # of 40 looks, about half


async def test_the_woken_tenants_own_bulk_work_does_not_wait_for_its_pickup() -> None:
    """A poll of the woken group began just before the delivery: its requests go on (the
    pickup's observation comes after it), while other tenants' wait."""
    priority = Priority(window=5, make_way_at_most=5)
    priority.begin("team-a/ci", "team-a")
    started = time.monotonic()
    await priority.make_way("team-a")
    assert time.monotonic() - started < 0.01
    other = asyncio.ensure_future(priority.make_way("evil"))
    await asyncio.sleep(0.02)
    assert not other.done()
    priority.passed("team-a/ci", started=time.monotonic())
    await asyncio.wait_for(other, 1)
    assert not priority._tenants  # the closed window's tenant is forgotten


async def test_a_pickup_goes_on_until_the_creates_its_pass_handed_on_are_answered() -> None:
    """The pass hands its runner creates to the group's writer and ends: the window stays
    open until the writer is done with them."""
    priority = Priority(window=5, make_way_at_most=5)
    priority.begin("team-a/ci", "team-a")
    finished = priority.carry("team-a/ci")
    priority.passed("team-a/ci", started=time.monotonic())
    assert priority.under_way  # the create is still on its way
    finished()
    assert not priority.under_way
    finished()  # twice is once
    assert not priority.under_way


async def test_a_late_writer_does_not_close_the_next_pickups_window() -> None:
    priority = Priority(window=0.02, make_way_at_most=5)
    priority.begin("team-a/ci")
    finished = priority.carry("team-a/ci")
    await asyncio.sleep(0.05)  # the window timed out; its writer is still busy
    assert not priority.under_way
    priority.begin("team-a/ci")  # the next delivery
    finished()
    assert priority.under_way
    assert priority.carry("team-b/ci")() is None  # no window, nothing to carry


async def test_a_step_of_a_tenant_waiting_for_another_pickup_goes_on_once_its_own_begins() -> None:
    """The woken group's poll, in flight, began to wait for another tenant's pickup; the
    wake opens its own tenant's window, and it must not wait for its own pickup (its refresh
    waits for that poll)."""
    priority = Priority(window=5, make_way_at_most=5)
    priority.begin("team-b/ci", "team-b")
    own = asyncio.ensure_future(priority.make_way("team-a"))
    other = asyncio.ensure_future(priority.make_way("evil"))
    await asyncio.sleep(0.02)
    assert not own.done() and not other.done()
    priority.begin("team-a/ci", "team-a")  # a delivery woke team-a's group
    await asyncio.wait_for(own, 1)
    assert not other.done()
    priority.passed("team-a/ci", started=time.monotonic())
    priority.passed("team-b/ci", started=time.monotonic())
    await asyncio.wait_for(other, 1)
