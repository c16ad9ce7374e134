"""Issue 46: a SIGKILLed replica's domains are taken inside the Lease bound. The survivors
see the lapse when it falls due, take about one read after the last of them published the
new view, and have the lapsing peer's Jobs and Pods read before the take; never earlier
than the fencing rule allows (sharding/tenure.py)."""

from __future__ import annotations

import asyncio

from gitea_runner_operator.sharding.leases.round import Sharding, layout_of
from tests.support.leases import Clock, FakeLeases
from tests.support.rounds import GROUPS, Replica, exclusive, rounds

PERIOD = 2.0


class Reader(Replica):
    """A replica whose Jobs and Pods fetches (``prepare``) and drops are recorded."""

    def __init__(self, api: FakeLeases, clock: Clock, name: str) -> None:
        super().__init__(api, clock, name)
        self.prepared: list[frozenset[str]] = []
        self.dropped: list[frozenset[str]] = []
        self.sharding = Sharding(
            self.leases,
            lambda: layout_of(GROUPS.items()),
            take=self.taken.append,
            release=self._release,
            prepare=self._prepare,
            unprepare=self.dropped.append,
            retry_period=PERIOD,
            clock=clock,
        )

    async def _prepare(self, keys: frozenset[str]) -> None:
        self.prepared.append(keys)


async def three(clock: Clock) -> tuple[Reader, Reader, Reader]:
    api = FakeLeases()
    a, b, c = (Reader(api, clock, n) for n in "abc")
    await rounds([a, b, c], 4)
    assert all(r.serves() for r in (a, b, c))
    return a, b, c


async def silent(clock: Clock, replicas: list[Reader], seconds: float) -> None:
    """``seconds`` pass with a round of each of ``replicas`` every period (the others are
    killed: they neither renew nor release)."""
    for _ in range(int(seconds / PERIOD)):
        clock.now += PERIOD
        await rounds(replicas, 1)
        await asyncio.sleep(0)  # the reads ahead run


def test_a_survivor_reads_again_when_the_lapse_falls_due_not_a_period_later() -> None:
    async def main() -> None:
        clock = Clock()
        a, b, _killed = await three(clock)
        await silent(clock, [a, b], 14)  # a first saw c's last record 2 s after it was written
        clock.now += 2.5  # due at 17 s after c's last write, on a's clock
        await rounds([a], 1)
        wait = a.sharding.next_read_in()
        assert 0 < wait < 1.0, wait  # due 0.5 s after this read, not at the next period

    asyncio.run(main())


def test_a_survivor_that_published_reads_again_at_once_until_its_peer_agrees() -> None:
    async def main() -> None:
        clock = Clock()
        a, b, c = await three(clock)
        theirs = c.serves()
        await silent(clock, [a, b], 16)  # c's lapse falls due 1 s later on a's and b's clocks
        clock.now += 1.5
        # a sees it first, publishes and rereads; b has not published yet: no take.
        gained_before = set(a.serves())
        await a.sharding.round()
        assert a.sharding.tenure.current is not None
        assert a.sharding.tenure.current.view == {"a", "b"}
        await a.sharding.round()
        assert a.serves() == gained_before
        assert a.sharding.next_read_in() <= PERIOD / 4  # not a whole period later
        await b.sharding.round()  # b publishes the same view
        await a.sharding.round()  # a's quick read: now it takes
        exclusive([a, b])
        await b.sharding.round()
        assert a.serves() | b.serves() >= theirs

    asyncio.run(main())


def test_a_lapsing_peers_jobs_and_pods_are_read_before_the_take_and_only_read() -> None:
    async def main() -> None:
        clock = Clock()
        a, b, _killed = await three(clock)
        mine_before, marks = a.serves() | b.serves(), (len(a.prepared), len(b.prepared))
        await silent(clock, [a, b], 12)  # c silent past the renew deadline, not lapsed
        read = set().union(*a.prepared[marks[0] :], *b.prepared[marks[1] :])
        will_take = set(GROUPS) - mine_before
        assert will_take and will_take <= read  # fetched ahead, before any lapse
        assert a.serves() | b.serves() == mine_before  # and not acted on
        marks = (len(a.prepared), len(b.prepared))
        await silent(clock, [a, b], 8)  # c lapses; a and b take its domains
        assert a.serves() | b.serves() == set(GROUPS)
        late = set().union(*a.prepared[marks[0] :], *b.prepared[marks[1] :])
        assert not late - read  # the take fetched nothing that was not read ahead

    asyncio.run(main())


def test_what_was_read_ahead_is_dropped_when_the_peer_renews_after_all() -> None:
    async def main() -> None:
        clock = Clock()
        a, b, c = await three(clock)
        theirs = c.serves()
        assert not a.sharding.ahead.keys | b.sharding.ahead.keys
        await silent(clock, [a, b], 12)
        assert a.sharding.ahead.keys | b.sharding.ahead.keys == theirs
        await c.leases.renew(c.sharding.tenure.current)  # c was only slow: renewed in time
        await rounds([a, b], 1)
        dropped = set().union(*a.dropped, *b.dropped)
        assert dropped and dropped <= theirs
        assert not a.sharding.ahead.keys | b.sharding.ahead.keys
        assert not (a.serves() | b.serves()) & theirs  # nothing moved

    asyncio.run(main())
