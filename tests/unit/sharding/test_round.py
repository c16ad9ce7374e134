"""The sharding loop of each replica, on one in-memory Lease API: replicas share the
groups by domain, never act on one group together, hand over when one stops or cannot renew,
and tell the controller what to stop and what to start."""

from __future__ import annotations

import asyncio
from typing import Any

from gitea_runner_operator.metrics import PREFIX, Metrics
from gitea_runner_operator.sharding.leases.round import Sharding, layout_of
from tests.support.leases import Clock, FakeLeases
from tests.support.rounds import GROUPS, Replica, exclusive, rounds


def test_one_replica_serves_every_group_after_publishing() -> None:
    async def main() -> None:
        api, clock = FakeLeases(), Clock()
        a = Replica(api, clock, "a")
        await a.sharding.round()  # publishes its view; acts on nothing yet
        assert a.serves() == set() and not a.taken
        await a.sharding.round()
        assert a.serves() == set(GROUPS)
        assert a.taken == [frozenset(GROUPS)]

    asyncio.run(main())


def test_replicas_share_the_groups_and_keep_a_domain_whole() -> None:
    async def main() -> None:
        api, clock = FakeLeases(), Clock()
        a, b, c = (Replica(api, clock, n) for n in "abc")
        await rounds([a], 2)
        await rounds([a, b, c], 4)
        layout = layout_of(GROUPS.items())
        assert len(layout.domains) == 13  # ns/org3 and ns/app3 share one; ns/broken is alone
        shares = [r.serves() for r in (a, b, c)]
        assert set().union(*shares) == set(GROUPS)
        assert all(shares), shares  # 13 domains over 3 replicas: each gets some
        assert any({"ns/app3", "ns/org3"} <= s for s in shares)
        moved = set().union(*a.released)
        assert moved == set(GROUPS) - a.serves()  # a released just what it gave away

    asyncio.run(main())


def test_a_stopping_replica_hands_over_at_once() -> None:
    async def main() -> None:
        api, clock = FakeLeases(), Clock()
        a, b = Replica(api, clock, "a"), Replica(api, clock, "b")
        await rounds([a, b], 4)
        theirs = b.serves()
        assert theirs
        stop = asyncio.Event()
        stop.set()
        await b.sharding.run(stop)  # released, Lease deleted
        assert b.serves() == set() and b.released[-1] == theirs
        await rounds([a], 2)  # no wait for a lapse
        assert a.serves() == set(GROUPS)

    asyncio.run(main())


def test_a_replica_that_cannot_renew_stops_before_its_lease_lapses() -> None:
    async def main() -> None:
        api, clock = FakeLeases(), Clock()
        a, b = Replica(api, clock, "a"), Replica(api, clock, "b")
        await rounds([a, b], 4)
        mine = b.serves()
        b.link.down = True
        cut = clock.now
        for _ in range(4):  # 8 s: a renews, b cannot
            clock.now += 2
            await rounds([a, b], 1)
        assert b.serves() == mine  # within the renew deadline: still serving
        clock.now += 2
        await rounds([a, b], 1)
        assert b.serves() == set() and b.released[-1] == mine
        assert not a.serves() & mine  # b's Lease has not lapsed on a's clock yet
        while a.serves() != set(GROUPS):
            assert clock.now - cut < 15 + 3 * 2  # the Lease duration and three periods
            clock.now += 2
            await rounds([a, b], 1)
        b.link.down = False
        await rounds([b, a], 3)
        assert b.serves()  # b comes back and gets its share again

    asyncio.run(main())


def test_having_published_a_replica_reads_again_at_once_not_a_period_later() -> None:
    async def main() -> None:
        api, clock = FakeLeases(), Clock()
        a = Replica(api, clock, "a")
        a.sharding._period = 3600.0  # a period later would be never, in this test
        stop = asyncio.Event()
        running = asyncio.create_task(a.sharding.run(stop))
        try:
            for _ in range(100):
                if a.serves() == set(GROUPS):
                    break
                await asyncio.sleep(0.01)
            assert a.serves() == set(GROUPS)  # publish, then take on the read right after
            await asyncio.sleep(0.1)
            # Two rounds (a renewal each, and the publication): no third one at once.
            assert len(api.writes) == 3
        finally:
            stop.set()
            await running

    asyncio.run(main())


def test_after_each_round_the_loop_lets_the_watches_follow_what_is_held() -> None:
    async def main() -> None:
        api, clock = FakeLeases(), Clock()
        a = Replica(api, clock, "a")
        after: list[int] = []
        a.sharding._settled = lambda: after.append(len(a.sharding.tenure.held))
        a.sharding._period = 0.01
        stop = asyncio.Event()
        running = asyncio.create_task(a.sharding.run(stop))
        try:
            for _ in range(100):
                if after and after[-1] > 0:
                    break
                await asyncio.sleep(0.01)
            assert after and after[-1] == len(a.sharding.tenure.held) > 0
        finally:
            stop.set()
            await running

    asyncio.run(main())


def test_past_its_deadline_a_replica_acts_on_nothing_even_before_its_loop_runs() -> None:
    async def main() -> None:
        api, clock = FakeLeases(), Clock()
        a = Replica(api, clock, "a")
        await rounds([a], 2)
        assert a.serves() == set(GROUPS)
        clock.now += 9.9
        assert a.serves() == set(GROUPS)
        clock.now += 0.1  # a stalled event loop: no round has run since
        assert a.serves() == set()
        await rounds([a], 1)  # its loop runs at last: it steps down for good
        assert a.released[-1] == frozenset(GROUPS)
        await rounds([a], 2)  # and takes the groups again after publishing anew
        assert a.serves() == set(GROUPS)

    asyncio.run(main())


def test_a_renewal_counts_from_when_it_was_asked_not_when_its_answer_was_read() -> None:
    async def main() -> None:
        api, clock = FakeLeases(), Clock()
        a = Replica(api, clock, "a")
        await rounds([a], 2)
        renew = a.leases.renew

        async def slow(published: Any) -> bool:
            done = await renew(published)
            clock.now += 6  # the answer is read 6 s after the renewal was written
            return done

        a.leases.renew = slow  # type: ignore[method-assign]
        await rounds([a], 1)
        clock.now += 4  # 10 s after the renewal the others saw: the deadline
        assert a.serves() == set()

    asyncio.run(main())


def test_a_replica_whose_lease_another_removed_steps_down_and_joins_again() -> None:
    async def main() -> None:
        api, clock = FakeLeases(), Clock()
        a, b = Replica(api, clock, "a"), Replica(api, clock, "b")
        await rounds([a, b], 4)
        mine = a.serves()
        assert mine
        del api.objects[a.leases.name]  # b (or anyone) counted it lapsed and removed it
        await a.sharding.round()
        assert a.serves() == set() and a.released[-1] == mine
        exclusive([a, b])
        await rounds([a, b], 4)
        assert a.serves() == mine  # published again, and took its share back

    asyncio.run(main())


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(PREFIX + name, labels) or 0.0


def test_metrics_give_each_replicas_domains_and_every_hand_over_with_its_wait() -> None:
    async def main() -> None:
        api, clock = FakeLeases(), Clock()
        ma, mb = Metrics(), Metrics()
        a, b = Replica(api, clock, "a", ma), Replica(api, clock, "b", mb)
        assert sample(ma, "domain_handovers_total", reason="stopping") == 0  # listed at 0
        await rounds([a], 2)
        assert sample(ma, "domains_held") == 13
        await rounds([a, b], 4)
        theirs = sample(mb, "domains_held")
        assert theirs and sample(ma, "domains_held") + theirs == 13
        assert sample(ma, "domain_handovers_total", reason="taken") == 13
        assert sample(ma, "domain_handovers_total", reason="released") == theirs
        assert sample(mb, "domain_handovers_total", reason="taken") == theirs
        stop = asyncio.Event()
        stop.set()
        await b.sharding.run(stop)  # b stops: its Lease is deleted
        assert sample(mb, "domains_held") == 0
        assert sample(mb, "domain_handovers_total", reason="stopping") == theirs
        clock.now += 2
        await rounds([a], 1)  # sees b gone, publishes the view without b
        clock.now += 2
        await rounds([a], 1)  # takes b's domains: 2 s after it saw b gone
        assert sample(ma, "domains_held") == 13
        assert sample(ma, "domain_handover_seconds_count") == theirs
        assert sample(ma, "domain_handover_seconds_sum") == 2 * theirs
        assert sample(ma, "domain_handover_seconds_bucket", le="1.0") == 0
        assert sample(ma, "domain_handover_seconds_bucket", le="2.0") == theirs
        a.link.down = True  # a can renew no more: at the deadline it steps down
        clock.now += 10
        await rounds([a], 1)
        assert sample(ma, "domains_held") == 0
        assert sample(ma, "domain_handovers_total", reason="stepped_down") == 13

    asyncio.run(main())


def test_a_domain_whose_fetch_outlasts_the_renew_budget_is_served_once_fetched() -> None:
    """Issue 46: a slow API server used to cut every fetch of a taken domain at the round's
    renew budget, so the domain was held and never served. The fetch now goes on past the
    round and opens the groups when it ends; one that fails releases its domains, which a
    later round takes and fetches afresh."""

    async def main() -> None:
        api, clock = FakeLeases(), Clock()
        fetched: list[frozenset[str]] = []
        failing = [True]

        async def slow_fetch(keys: frozenset[str]) -> None:
            await asyncio.sleep(0.3)  # longer than the 0.1 s renew budget below
            if failing[0]:
                failing[0] = False
                raise OSError("the API server went away")
            fetched.append(keys)

        a = Replica(api, clock, "a")
        a.sharding = Sharding(
            a.leases,
            lambda: layout_of(GROUPS.items()),
            take=a.taken.append,
            release=a._release,
            prepare=slow_fetch,
            renew_deadline=0.1,
            clock=clock,
        )
        await a.sharding.round()
        await a.sharding.round()  # takes every domain; the fetch outlives the round
        assert a.serves() == set()
        await asyncio.sleep(0.4)  # the fetch failed
        await a.sharding.round()  # released, to be taken afresh
        assert a.released and a.serves() == set()
        for _ in range(3):
            await a.sharding.round()
        await asyncio.sleep(0.4)
        assert a.serves() == set(GROUPS)  # served without another round
        assert fetched and a.taken == [frozenset(GROUPS)]

    asyncio.run(main())
