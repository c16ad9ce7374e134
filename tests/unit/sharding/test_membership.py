"""Membership Leases against an in-memory Lease API with the API server's compare-and-swap
(resourceVersion) and delete preconditions. The testbed's API server was not built when this
was written; tests/integration would run the same calls against it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.sharding.forwards import WEBHOOK_ANNOTATION
from gitea_runner_operator.sharding.leases.membership import (
    MEMBERS_LABEL,
    MembershipLeases,
    lease_name,
)
from gitea_runner_operator.sharding.tenure import ANNOTATION, Published
from tests.support.leases import Clock, FakeLeases

NS = "ops"


def member(api: FakeLeases, identity: str, clock: Clock, release: str = "gro") -> MembershipLeases:
    return MembershipLeases(
        None,  # type: ignore[arg-type]
        NS,
        release,
        identity,
        lease_duration=15,
        clock=clock,
        leases=api,
    )


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_members_see_each_other_and_what_each_publishes() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = member(api, "pod-a", clock), member(api, "pod-b", clock)
    view = Published(frozenset({"pod-a", "pod-b"}), "fp")
    assert run(a.renew(view)) and run(b.renew(None))
    reading = run(a.read(3))
    assert reading.fresh == {"pod-b": None} and reading.publication == 3
    assert run(b.read(0)).fresh == {"pod-a": view}
    stored = api.objects[lease_name("gro", "pod-a")]
    assert stored["metadata"]["labels"] == {MEMBERS_LABEL: "gro"}
    assert stored["spec"]["holderIdentity"] == "pod-a"
    assert stored["spec"]["leaseDurationSeconds"] == 15
    # A later renewal without a new record keeps the one published.
    assert run(a.renew(None))
    assert run(b.read(0)).fresh == {"pod-a": view}


def test_another_release_is_not_a_member() -> None:
    api, clock = FakeLeases(), Clock()
    run(member(api, "pod-a", clock).renew(None))
    run(member(api, "pod-x", clock, release="other").renew(None))
    assert run(member(api, "pod-b", clock).read(0)).fresh == {"pod-a": None}


def test_a_lease_lapses_after_its_duration_unchanged_on_the_readers_clock() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = member(api, "pod-a", clock), member(api, "pod-b", clock)
    run(a.renew(None))
    assert "pod-a" in run(b.read(0)).fresh  # first sighting: counted from now
    clock.now += 14
    assert "pod-a" in run(b.read(0)).fresh
    clock.now += 1
    assert run(b.read(0)).fresh == {}  # unchanged for 15 s on b's clock: lapsed
    run(a.renew(None))
    assert "pod-a" in run(b.read(0)).fresh  # renewed: fresh again
    # A reader that starts late cannot tell how old a record is: it waits a full duration.
    late = member(api, "pod-c", clock)
    clock.now += 100
    assert "pod-a" in run(late.read(0)).fresh


def test_a_reading_says_when_each_fresh_lease_would_lapse_on_the_readers_clock() -> None:
    """Issue 46: a reader reads again when a lapse falls due, not up to a period later; the
    lapse itself still waits the whole duration from the first sighting."""
    api, clock = FakeLeases(), Clock()
    a, b = member(api, "pod-a", clock), member(api, "pod-b", clock)
    run(a.renew(None))
    assert run(b.read(0)).lapse_in == {"pod-a": 15}  # first sighting: a whole duration
    clock.now += 13.5
    assert run(b.read(0)).lapse_in == {"pod-a": 1.5}
    run(a.renew(None))
    assert run(b.read(0)).lapse_in == {"pod-a": 15}  # renewed: counted afresh
    clock.now += 15
    reading = run(b.read(0))
    assert reading.fresh == {} and reading.lapse_in == {}


def test_failures_are_not_renewals_and_a_failed_list_is_no_reading() -> None:
    api, clock = FakeLeases(), Clock()
    a = member(api, "pod-a", clock)
    api.fail = ApiException(status=500)
    assert not run(a.renew(None))
    assert run(a.read(0)) is None
    api.fail = OSError("connection reset")
    assert not run(a.renew(None))
    api.fail = None
    assert run(a.renew(None))


def test_a_write_that_loses_the_compare_and_swap_is_not_a_renewal() -> None:
    api, clock = FakeLeases(), Clock()
    a = member(api, "pod-a", clock)
    run(a.renew(None))
    real = api.read_namespaced_lease

    async def read_then_someone_writes(name: str, namespace: str, **kw: Any) -> Any:
        got = await real(name, namespace, **kw)
        api.steal(name)
        return got

    api.read_namespaced_lease = read_then_someone_writes  # type: ignore[method-assign]
    assert not run(a.renew(None))


def test_release_deletes_only_the_version_it_wrote() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = member(api, "pod-a", clock), member(api, "pod-b", clock)
    run(a.renew(None))
    run(a.release())
    assert run(b.read(0)).fresh == {}
    run(a.renew(None))
    api.steal(a.name)
    run(a.release())  # someone wrote since: not ours to delete
    assert a.name in api.objects


@pytest.mark.parametrize(
    ("release", "identity", "expected"),
    [
        ("gro", "gro-7d9f-abcde", "gro-member-gro-7d9f-abcde"),
        ("GRO", "Pod_1", "gro-member-pod-1"),
    ],
)
def test_lease_names_are_valid_object_names(release: str, identity: str, expected: str) -> None:
    assert lease_name(release, identity) == expected
    assert len(lease_name("r", "x" * 400)) <= 253


def test_an_unreadable_record_reads_as_none() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = member(api, "pod-a", clock), member(api, "pod-b", clock)
    run(a.renew(None))
    api.objects[a.name]["metadata"]["annotations"] = {ANNOTATION: "{not json"}
    assert run(b.read(0)).fresh == {"pod-a": None}


def test_a_lapsed_lease_is_deleted_so_later_members_need_not_wait_for_it() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = member(api, "pod-a", clock), member(api, "pod-b", clock)
    run(a.renew(None))  # pod-a is then killed: it never releases
    assert "pod-a" in run(b.read(0)).fresh
    clock.now += 15
    assert run(b.read(0)).fresh == {}
    assert lease_name("gro", "pod-a") not in api.objects  # collected by the reader
    late = member(api, "pod-c", clock)
    assert run(late.read(0)).fresh == {}  # nothing left that would hold it back 15 s
    assert run(a.renew(None))  # pod-a was only partitioned: it simply joins again
    assert "pod-a" in run(late.read(0)).fresh


def test_a_lease_renewed_after_it_was_seen_lapsing_is_not_deleted() -> None:
    api, clock = FakeLeases(), Clock()
    a, b = member(api, "pod-a", clock), member(api, "pod-b", clock)
    run(a.renew(None))
    run(b.read(0))
    clock.now += 15
    name = lease_name("gro", "pod-a")
    seen = run(b._calls.list(f"{MEMBERS_LABEL}=gro"))
    run(a.renew(None))  # renewed between b's list and its delete
    run(b._collect(seen))
    assert name in api.objects
    assert "pod-a" in run(b.read(0)).fresh


def test_members_see_where_each_other_receives_webhooks() -> None:
    api, clock = FakeLeases(), Clock()
    a = MembershipLeases(
        None,  # type: ignore[arg-type]
        NS,
        "gro",
        "pod-a",
        clock=clock,
        leases=api,
        webhook="10.0.0.1:8082",
    )
    b, c = member(api, "pod-b", clock), member(api, "pod-c", clock)
    assert run(a.renew(None)) and run(b.renew(None)) and run(c.renew(None))
    assert run(c.read(0)) is not None
    assert c.addresses == {"pod-a": "10.0.0.1:8082", "pod-b": None}
    # Webhooks turned off on a later start: the next renewal takes the address back.
    a.webhook = None
    assert run(a.renew(None))
    run(c.read(0))
    assert c.addresses == {"pod-a": None, "pod-b": None}


def test_an_address_that_is_not_an_ip_and_a_port_is_no_address() -> None:
    api, clock = FakeLeases(), Clock()
    writer = member(api, "pod-a", clock)
    writer.webhook = "10.0.0.1:8082"
    run(writer.renew(None))
    reader = member(api, "pod-b", clock)
    run(reader.read(0))
    assert reader.addresses == {"pod-a": "10.0.0.1:8082"}
    stored = api.objects[lease_name("gro", "pod-a")]["metadata"]["annotations"]
    stored[WEBHOOK_ANNOTATION] = "evil.example:80/steal"
    run(reader.read(0))
    assert reader.addresses == {"pod-a": None}
