"""Rendezvous assignment moves only what must move, and one member's tenure follows the
fencing rule step by step (the interleavings are in test_handover_property.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gitea_runner_operator.api.shard import SHARDS, domain_id, shard_of
from gitea_runner_operator.sharding.tenure import (
    Arrivals,
    Layout,
    Published,
    Reading,
    Tenure,
    assignment,
    owner,
)

names = st.text("abcdefgh", min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.sets(names, max_size=40), st.sets(names, min_size=1, max_size=6), names)
def test_a_joining_member_takes_only_what_it_now_owns(
    domain_ids: set[str], members: set[str], newcomer: str
) -> None:
    before = assignment(domain_ids, members)
    after = assignment(domain_ids, members | {newcomer})
    for d in domain_ids:
        if before[d] != after[d]:
            assert after[d] == newcomer


@settings(max_examples=300, deadline=None)
@given(st.sets(names, max_size=40), st.sets(names, min_size=2, max_size=6), st.data())
def test_a_leaving_member_gives_away_only_its_own(
    domain_ids: set[str], members: set[str], data: st.DataObject
) -> None:
    leaver = data.draw(st.sampled_from(sorted(members)))
    before = assignment(domain_ids, members)
    after = assignment(domain_ids, members - {leaver})
    for d in domain_ids:
        if before[d] != leaver:
            assert after[d] == before[d]
        else:
            assert after[d] != leaver


def test_domains_spread_over_members() -> None:
    ids = [domain_id([f"ns/g{i}"]) for i in range(3000)]
    counts: dict[str, int] = {}
    for m in assignment(ids, ["r0", "r1", "r2"]).values():
        counts[m] = counts.get(m, 0) + 1
    assert set(counts) == {"r0", "r1", "r2"}
    assert all(800 < n < 1200 for n in counts.values()), counts
    assert owner("d-1", []) is None


def test_published_round_trips_and_refuses_what_it_cannot_read() -> None:
    p = Published(frozenset({"b", "a"}), "f00d")
    assert Published.decode(p.encode()) == p
    for bad in (None, "", "{", "[]", '{"format":3,"members":[],"groups":"x"}',
                '{"format":2,"members":"a","groups":"x"}',
                '{"format":2,"members":[1],"groups":"x"}'):  # fmt: skip
        assert Published.decode(bad) is None


def test_a_replica_of_the_per_domain_scheme_is_not_agreed_with() -> None:
    """Format 1 bid for each domain, format 2 for its shard bucket: the two would give one
    domain two owners, so a record of format 1 reads as unreadable, which blocks every gain
    (a rolling upgrade takes nothing until every replica runs the new version)."""
    old = '{"format":1,"members":["a","b"],"groups":"f00d"}'
    assert Published.decode(old) is None
    me = Tenure("a")
    layout = Layout("f00d", {"d-000000000001": frozenset({"ns/g"})})
    me.published(me.plan(Reading({"b": None}, 0), layout).publish or Published(frozenset(), ""))
    assert me.plan(Reading({"b": Published.decode(old)}, 1), layout).take == frozenset()


def test_a_replica_holds_whole_shard_buckets() -> None:
    """Every domain of one bucket has the same owner, so a replica's Job and Pod watches can
    select its buckets by label and see every domain it holds and no other."""
    ids = [domain_id([f"ns/g{i}"]) for i in range(2000)]
    members = ["r0", "r1", "r2"]
    owners: dict[int, set[str | None]] = {}
    for d in ids:
        owners.setdefault(shard_of(d), set()).add(owner(d, members))
    assert len(owners) == SHARDS  # 2,000 domains fill every bucket
    assert all(len(found) == 1 for found in owners.values()), owners


def test_a_join_moves_about_one_nth_of_the_buckets_and_only_to_the_newcomer() -> None:
    buckets = [f"d-{b:012x}" for b in range(SHARDS)]  # one domain per bucket
    three, four = ["r0", "r1", "r2"], ["r0", "r1", "r2", "r3"]
    moved = [d for d in buckets if owner(d, three) != owner(d, four)]
    assert all(owner(d, four) == "r3" for d in moved)
    assert SHARDS / 8 <= len(moved) <= SHARDS / 2, len(moved)  # about SHARDS / 4


LAYOUT = Layout("fp1", {f"d-{i}": frozenset({f"ns/g{i}"}) for i in range(40)})


def test_a_member_alone_publishes_then_takes_everything_on_a_later_read() -> None:
    t = Tenure("r0")
    step = t.plan(Reading({}, t.publication), LAYOUT)
    assert step.publish == Published(frozenset({"r0"}), "fp1") and not step.take
    assert t.plan(Reading({}, t.publication), LAYOUT).publish is not None  # not written yet
    t.published(step.publish)
    stale = Reading({}, 0)  # begun before the write
    assert t.plan(stale, LAYOUT) == type(step)()
    taken = t.plan(Reading({}, t.publication), LAYOUT).take
    assert taken == set(LAYOUT.domains)
    assert t.groups() == {f"ns/g{i}" for i in range(40)}


def _settled(me: str, peers: dict[str, frozenset[str]]) -> Tenure:
    t = Tenure(me)
    view = frozenset({me, *peers})
    reading = Reading({p: Published(view, "fp1") for p in peers}, 0)
    step = t.plan(reading, LAYOUT)
    assert step.publish is not None
    t.published(step.publish)
    t.plan(Reading(reading.fresh, t.publication), LAYOUT)
    return t


def test_a_member_waits_for_a_peer_that_still_claims_the_domain() -> None:
    t = _settled("r0", {})
    mine = set(t.held)
    # r1 appears; it still publishes the old view {r1} alone, so it claims every domain.
    reading = Reading({"r1": Published(frozenset({"r1"}), "fp1")}, t.publication)
    step = t.plan(reading, LAYOUT)
    both = frozenset({"r0", "r1"})
    moving = {d for d in mine if owner(d, both) == "r1"}
    assert step.release == moving and step.publish == Published(both, "fp1")
    assert step.publish is not None
    t.published(step.publish)
    # r1 has not published the shared view yet: r0 keeps what stays its own, takes nothing.
    assert t.plan(Reading(reading.fresh, t.publication), LAYOUT).take == set()
    assert set(t.held) == mine - moving
    # r1 publishes {r0, r1}: nothing more for r0 to take (its share did not grow).
    agreed = Reading({"r1": Published(both, "fp1")}, t.publication)
    assert t.plan(agreed, LAYOUT).take == set()


def test_a_peer_with_other_groups_or_an_unreadable_lease_blocks_gains() -> None:
    for peer in (Published(frozenset({"r0", "r1"}), "fp2"), None):
        t = Tenure("r0")
        reading = Reading({"r1": peer}, 0)
        step = t.plan(reading, LAYOUT)
        assert step.publish is not None
        t.published(step.publish)
        assert t.plan(Reading(reading.fresh, t.publication), LAYOUT).take == set()


def test_a_changed_domain_is_released_before_the_new_fingerprint_is_published() -> None:
    t = _settled("r0", {})
    merged = dict(LAYOUT.domains)
    merged["d-0"] = frozenset({"ns/g0", "ns/g1"})
    del merged["d-1"]
    step = t.plan(Reading({}, t.publication), Layout("fp2", merged))
    assert step.release == {"d-0", "d-1"}
    assert step.publish == Published(frozenset({"r0"}), "fp2")


def test_stepping_down_releases_all_and_requires_a_new_publication() -> None:
    t = _settled("r0", {})
    assert t.step_down() == set(LAYOUT.domains)
    assert not t.groups()
    assert t.plan(Reading({}, t.publication), LAYOUT).publish is not None


def test_a_member_alone_at_start_waits_its_settle_reads_and_one_with_a_peer_does_not() -> None:
    """Replicas started together: the first one up must not take every domain for the few
    seconds until the others' Leases are written (it would start all their work, then hand
    it away)."""
    first = Tenure("r0", settle_reads=2)
    step = first.plan(Reading({}, 0), LAYOUT)
    assert step.publish is not None
    first.published(step.publish)
    assert first.plan(Reading({}, first.publication), LAYOUT).take == set()
    assert first.plan(Reading({}, first.publication), LAYOUT).take == set()
    assert first.plan(Reading({}, first.publication), LAYOUT).take == set(LAYOUT.domains)

    late = Tenure("r1", settle_reads=2)  # a peer is there: no reason to wait for one
    both = Published(frozenset({"r0", "r1"}), "fp1")
    step = late.plan(Reading({"r0": both}, 0), LAYOUT)
    assert step.publish == both
    late.published(both)
    mine = {d for d in LAYOUT.domains if owner(d, both.view) == "r1"}
    assert late.plan(Reading({"r0": both}, late.publication), LAYOUT).take == mine

    again = Tenure("r2", settle_reads=2)  # after a step-down it does not wait again
    again.published(again.plan(Reading({}, 0), LAYOUT).publish)  # type: ignore[arg-type]
    for _ in range(3):
        again.plan(Reading({}, again.publication), LAYOUT)
    again.step_down()
    again.published(again.plan(Reading({}, again.publication), LAYOUT).publish)  # type: ignore[arg-type]
    assert again.plan(Reading({}, again.publication), LAYOUT).take == set(LAYOUT.domains)


def test_the_domains_a_leaving_member_leaves_to_me_wait_from_when_it_was_seen_gone() -> None:
    ids, layout = list(LAYOUT.domains), LAYOUT
    arrivals = Arrivals("a")
    everyone = Reading({"b": None, "c": None}, 0)
    arrivals.read(everyone, layout, now=100.0)
    assert arrivals.since == {}  # nobody has left yet
    arrivals.read(Reading({"c": None}, 0), layout, now=104.0)  # b released or lapsed
    mine = {d for d in ids if owner(d, {"a", "b", "c"}) == "b" and owner(d, {"a", "c"}) == "a"}
    bs = {d for d in ids if owner(d, {"a", "b", "c"}) == "b"}
    assert mine and bs - mine and set(arrivals.since) == mine  # not b's domains that go to c
    arrivals.read(Reading({"c": None}, 0), layout, now=106.0)  # still gone: the start stays
    first = sorted(mine)[0]
    assert arrivals.served([first, "not-waiting"], now=107.5) == [3.5]
    assert arrivals.served([first], now=108.0) == []  # counted once
    # b is back before a served the rest: they are b's again and wait for a no more
    arrivals.read(everyone, layout, now=109.0)
    assert arrivals.since == {}
