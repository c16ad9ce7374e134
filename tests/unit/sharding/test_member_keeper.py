"""--sharding: the membership Lease is renewed from a thread of its own while the main
loop's heartbeat is fresh, as the leader Lease is: a loop too busy to run the sharding round
keeps its domains, and a wedged one stops renewing and stops acting by its renew deadline."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from gitea_runner_operator.kube.lease_thread import LeaseTiming
from gitea_runner_operator.sharding.leases.keeper import MemberKeeper
from gitea_runner_operator.sharding.leases.membership import MembershipLeases, lease_name
from gitea_runner_operator.sharding.leases.round import Sharding, layout_of
from tests.support.builders import spec_with
from tests.support.leases import FakeLeases

GROUPS = {f"ns/app{i}": {"spec": spec_with(org=f"o{i}", repo="app")} for i in range(3)}
TIMING = LeaseTiming(lease_duration=3, renew_deadline=1.5, retry_period=0.2, heartbeat_limit=0.6)


def replica(leases: FakeLeases, heartbeat_age: Any) -> tuple[Sharding, MemberKeeper]:
    def members(api: Any) -> MembershipLeases:
        return MembershipLeases(api, "ops", "gro", "a", lease_duration=3, leases=leases)

    @contextlib.asynccontextmanager
    async def opened() -> AsyncIterator[MembershipLeases]:
        yield members(None)

    keeper = MemberKeeper(opened, TIMING, heartbeat_age)

    async def release(keys: frozenset[str]) -> None:
        pass

    sharding = Sharding(
        members(None),
        lambda: layout_of(GROUPS.items()),
        take=lambda keys: None,
        release=release,
        keeper=keeper,
        retry_period=TIMING.retry_period,
        renew_deadline=TIMING.renew_deadline,
    )
    return sharding, keeper


async def test_a_loop_too_busy_for_rounds_keeps_its_domains_while_its_heartbeat_is_fresh():
    leases = FakeLeases()
    frozen: list[float] = []

    def heartbeat_age() -> float:
        return time.monotonic() - frozen[0] if frozen else 0.0

    sharding, keeper = replica(leases, heartbeat_age)
    keeper.start()
    try:
        await sharding.round()
        await sharding.round()
        assert all(sharding.acts_on(k) for k in GROUPS)
        start = time.monotonic()
        await asyncio.sleep(3 * TIMING.renew_deadline)  # no round runs: only the thread renews
        assert all(sharding.acts_on(k) for k in GROUPS)
        assert leases.renewals("a", start) >= 10
        frozen.append(time.monotonic())  # the loop is wedged from here on (as the thread sees)
        await asyncio.sleep(TIMING.heartbeat_limit + TIMING.retry_period)
        last = max(t for t, holder in leases.writes if holder == "a")
        assert last - frozen[0] <= TIMING.heartbeat_limit + TIMING.retry_period + 0.1
        # the deadline counts from the last renewal: acting stops well before others see a
        # lapse (lease duration after their last sighting of that renewal)
        await asyncio.sleep(max(0.0, last + TIMING.renew_deadline + 0.05 - time.monotonic()))
        assert not any(sharding.acts_on(k) for k in GROUPS)
        assert keeper.stale_skips > 0
        frozen.clear()
        stop = asyncio.Event()
        stop.set()
        await sharding.run(stop)  # releases through the thread: the Lease is gone
        assert leases.holder(lease_name("gro", "a")) is None
    finally:
        await keeper.close()
