"""The Lease record, body and client-go's lapse rule, shared by the leader and the members."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

from gitea_runner_operator.objects.leases import LeaseRecord, Sightings, lease_body
from tests.support.leases import Clock


def record(version: str = "1", renewed: str = "t1", holder: str = "a") -> LeaseRecord:
    return LeaseRecord(name="l", version=version, holder=holder, renewed=renewed, duration=15)


def test_a_record_lapses_only_after_its_duration_unchanged_on_the_readers_clock() -> None:
    clock = Clock()
    seen = Sightings(clock)
    assert not seen.lapsed(record(), 15)
    clock.now += 14.9
    assert not seen.lapsed(record(), 15)
    clock.now += 0.1
    assert seen.lapsed(record(), 15)
    # Any change (a renewal, a new version) starts the count again.
    assert not seen.lapsed(record(version="2"), 15)
    clock.now += 14
    assert not seen.lapsed(record(version="2"), 15)


def test_a_lease_no_longer_listed_is_forgotten() -> None:
    clock = Clock()
    seen = Sightings(clock)
    seen.lapsed(record(), 15)
    clock.now += 20
    seen.retain([])
    assert not seen.lapsed(record(), 15)  # seen anew: a fresh duration


def test_a_read_lease_keeps_its_times_in_the_apis_spelling() -> None:
    when = dt.datetime(2026, 1, 2, 3, 4, 5, 600000)
    lease = SimpleNamespace(
        metadata=SimpleNamespace(name="l", resource_version=7, annotations=None),
        spec=SimpleNamespace(
            holder_identity="",
            renew_time=when,
            acquire_time=when,
            lease_duration_seconds=15,
            lease_transitions=None,
        ),
    )
    read = LeaseRecord.of(lease)
    assert read.holder is None  # an empty holder is a released Lease
    assert read.acquired == read.renewed == "2026-01-02T03:04:05.600000Z"
    assert (read.version, read.transitions, read.annotations) == ("7", 0, {})


def test_a_write_carries_the_version_read_only_when_there_is_one() -> None:
    created = lease_body("ops", "l", {"holderIdentity": "a"})
    assert "resourceVersion" not in created["metadata"]
    replaced = lease_body("ops", "l", {}, version="9", labels={"k": "v"}, annotations={})
    assert replaced["metadata"] == {
        "name": "l",
        "namespace": "ops",
        "labels": {"k": "v"},
        "annotations": {},
        "resourceVersion": "9",
    }
    assert replaced["apiVersion"] == "coordination.k8s.io/v1"


def test_a_late_handled_answer_proves_silence_only_until_it_was_asked() -> None:
    clock = Clock()
    seen = Sightings(clock)
    seen.lapsed(record(), 15)  # first seen at 100
    clock.now += 17  # an answer handled at 117, to a read sent at 114
    assert not seen.lapsed(record(), 15, asked=clock.now - 3)
    assert seen.lapsed(record(), 15, asked=clock.now - 2)
