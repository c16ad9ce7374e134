"""The Lease does not share the event loop's fate: it is renewed from a thread of its own
while the loop's heartbeat is fresh, so a stall of a few seconds costs no renewal, and a
wedged loop stops renewing so that another replica can take over."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from gitea_runner_operator.kube.lease_thread import LeaseTiming
from gitea_runner_operator.runtime.leadership import (
    Leadership,
    LeaseElector,
    run_with_leadership,
)
from gitea_runner_operator.runtime.lease_keeper import LeaseKeeper
from gitea_runner_operator.runtime.loopwatch import LoopWatch
from gitea_runner_operator.settings import Settings
from tests.support.leases import FakeLeases


class IdleController:
    """Acts until told to stop or cancelled; counts its terms."""

    def __init__(self) -> None:
        self.cancelled = False

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await stop.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


def keeper(
    leases: FakeLeases, timing: LeaseTiming, heartbeat_age: Any, identity: str = "me"
) -> LeaseKeeper:
    @contextlib.asynccontextmanager
    async def opened() -> AsyncIterator[LeaseElector]:
        yield LeaseElector(
            None,  # type: ignore[arg-type]
            "ns",
            "lease",
            identity,
            lease_duration=int(timing.lease_duration),
            leases=leases,
        )

    return LeaseKeeper(opened, timing, heartbeat_age)


async def wait_for(condition: Any, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_a_three_second_stall_of_the_loop_misses_no_renewal() -> None:
    leases = FakeLeases()
    settings = Settings(identity="me", renew_deadline=10, retry_period=1, lease_duration=15)
    state, stop = Leadership(), asyncio.Event()
    controllers: list[IdleController] = []

    def make() -> Any:
        controllers.append(IdleController())
        return controllers[-1]

    async with LoopWatch() as watch:
        elected = keeper(leases, LeaseTiming.of(settings), watch.heartbeat_age)
        running = asyncio.create_task(run_with_leadership(elected, settings, make, stop, state))
        await wait_for(lambda: state.controller is not None)
        await asyncio.sleep(1.2)
        start = time.monotonic()
        time.sleep(3.0)  # noqa: ASYNC251 - the loop is held, as a long parse or render would
        end = time.monotonic()
        during = leases.renewals("me", start, end)
        print(f"renewals while the loop was held for 3 s: {during}")
        assert during >= 2
        await asyncio.sleep(0.2)
        assert state.terms == 1 and not controllers[0].cancelled  # leadership was never lost
        stop.set()
        assert await asyncio.wait_for(running, 10) == 0
    assert leases.holder("lease") is None  # released on the way out


async def test_a_wedged_loop_stops_renewing_and_another_replica_takes_over() -> None:
    """The heartbeat freezes (the loop is wedged): the keeper stops renewing within the
    heartbeat limit, the term is lost at the renew deadline, and a standby with a live loop
    takes the Lease once it has seen it unchanged for the lease's duration."""
    leases = FakeLeases()
    timing = LeaseTiming(
        lease_duration=2, renew_deadline=1.5, retry_period=0.2, heartbeat_limit=0.6
    )
    settings = Settings(identity="me")
    frozen_at: list[float] = []

    def heartbeat_age() -> float:
        return time.monotonic() - frozen_at[0] if frozen_at else 0.0

    state, stop = Leadership(), asyncio.Event()
    controllers: list[IdleController] = []

    def make() -> Any:
        controllers.append(IdleController())
        return controllers[-1]

    leader = keeper(leases, timing, heartbeat_age)
    running = asyncio.create_task(run_with_leadership(leader, settings, make, stop, state))
    await wait_for(lambda: state.controller is not None)
    await asyncio.sleep(0.5)
    assert leader.renewals >= 1
    frozen_at.append(time.monotonic())  # the loop stops waking from here on
    await wait_for(lambda: leader.stale_skips >= 1, within=5)
    with leases.lock:
        last_renewal = max(at for at, who in leases.writes if who == "me")
    # No renewal later than the heartbeat limit (plus one retry period in flight).
    assert last_renewal - frozen_at[0] <= timing.heartbeat_limit + timing.retry_period + 0.1
    # The term is lost: the controller is cancelled, as on any loss of the Lease.
    await wait_for(lambda: controllers[0].cancelled, within=5)
    assert state.controller is None

    # A standby, whose loop is alive, takes over once the Lease has lapsed.
    standby_state, standby_stop = Leadership(), asyncio.Event()
    standby = keeper(leases, timing, lambda: 0.0, identity="other")
    other = asyncio.create_task(
        run_with_leadership(
            standby, Settings(identity="other"), IdleController, standby_stop, standby_state
        )
    )
    await wait_for(lambda: leases.holder("lease") == "other", within=10)
    assert leases.renewals("me", start=last_renewal + 0.001) == 0
    stop.set()
    standby_stop.set()
    assert await asyncio.wait_for(running, 10) == 0
    assert await asyncio.wait_for(other, 10) == 0


async def test_a_lease_thread_that_cannot_start_ends_the_process_instead_of_idling() -> None:
    """Without its thread nobody would ever take or renew the Lease, while the replica looked
    like a ready standby: it exits non-zero so that Kubernetes restarts it."""

    @contextlib.asynccontextmanager
    async def broken() -> AsyncIterator[LeaseElector]:
        raise OSError("no credentials")
        yield  # pragma: no cover

    timing = LeaseTiming(lease_duration=2, renew_deadline=1.5, retry_period=0.2, heartbeat_limit=1)
    failing = LeaseKeeper(broken, timing, lambda: 0.0)
    code = await asyncio.wait_for(
        run_with_leadership(failing, Settings(), IdleController, asyncio.Event(), Leadership()), 5
    )
    assert code == 1
