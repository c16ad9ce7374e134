"""Where a webhook delivery's groups are served (--sharding): here, by which peer, or by a
peer nobody can reach; and what a Lease may say about where a replica receives webhooks."""

from __future__ import annotations

import pytest

from gitea_runner_operator.sharding.forwards import Split, address, parse_address, split
from gitea_runner_operator.sharding.tenure import owner

ME, B, C = "pod-a", "pod-b", "pod-c"
MEMBERS = frozenset({ME, B, C})


def domain_owned_by(member: str, members: frozenset[str] = MEMBERS, skip: int = 0) -> str:
    """A domain id the rendezvous hash gives to ``member`` among ``members``."""
    found = [d for d in (f"d{i}" for i in range(200)) if owner(d, members) == member]
    return found[skip]


def test_groups_served_here_stay_here_and_others_go_to_their_owner_once_per_peer() -> None:
    mine, b1, b2, c1 = (
        domain_owned_by(ME),
        domain_owned_by(B),
        domain_owned_by(B, skip=1),
        domain_owned_by(C),
    )
    domain_of = {"ns/mine": mine, "ns/b1": b1, "ns/b2": b2, "ns/c1": c1}
    got = split(
        ["ns/mine", "ns/b1", "ns/c1", "ns/b2", "ns/b1"],
        serves=lambda key: key == "ns/mine",
        domain_of=domain_of,
        me=ME,
        peers={B: "10.0.0.2:8082", C: "10.0.0.3:8082"},
    )
    assert got == Split(
        here=("ns/mine",),
        peers={"10.0.0.2:8082": ("ns/b1", "ns/b2"), "10.0.0.3:8082": ("ns/c1",)},
    )


def test_a_group_owned_by_a_member_without_an_address_is_unreachable() -> None:
    domain_of = {"ns/c1": domain_owned_by(C)}
    got = split(
        ["ns/c1"], serves=lambda _: False, domain_of=domain_of, me=ME, peers={B: None, C: None}
    )
    assert got == Split(unreachable=("ns/c1",))


def test_a_group_this_replica_owns_but_does_not_serve_yet_is_woken_here() -> None:
    """Mid hand-over: forwarding it to nobody, or to a peer that gave it away, helps no one."""
    domain_of = {"ns/mine": domain_owned_by(ME)}
    got = split(
        ["ns/mine"], serves=lambda _: False, domain_of=domain_of, me=ME, peers={B: "10.0.0.2:1"}
    )
    assert got == Split(here=("ns/mine",))


def test_a_group_the_layout_has_not_seen_is_woken_here() -> None:
    got = split(["ns/new"], serves=lambda _: False, domain_of={}, me=ME, peers={B: "10.0.0.2:1"})
    assert got == Split(here=("ns/new",))


def test_owners_are_computed_among_the_live_members_only() -> None:
    """A member whose Lease lapsed is not in ``peers``: its domains go to whom the others
    will hand them, never to the departed one."""
    lone = frozenset({ME, B})
    domain = next(
        d for d in (f"d{i}" for i in range(500)) if owner(d, MEMBERS) == C and owner(d, lone) == B
    )
    got = split(
        ["ns/x"], serves=lambda _: False, domain_of={"ns/x": domain}, me=ME, peers={B: "10.0.0.2:1"}
    )
    assert got == Split(peers={"10.0.0.2:1": ("ns/x",)})


def test_without_peers_everything_is_here() -> None:
    domain_of = {"ns/x": "d1", "ns/y": "d2"}
    got = split(["ns/x", "ns/y"], serves=lambda _: False, domain_of=domain_of, me=ME, peers={})
    assert got == Split(here=("ns/x", "ns/y"))


@pytest.mark.parametrize(
    ("ip", "port", "expected"),
    [
        ("10.1.2.3", 8082, "10.1.2.3:8082"),
        ("fd00::0:1", 8082, "[fd00::1]:8082"),
        (" 10.1.2.3 ", 8082, "10.1.2.3:8082"),
        (None, 8082, None),
        ("", 8082, None),
        ("operator.example", 8082, None),
        ("10.1.2.3", 0, None),
        ("10.1.2.3", 70000, None),
    ],
)
def test_the_published_address_is_an_ip_and_a_port(
    ip: str | None, port: int, expected: str | None
) -> None:
    assert address(ip, port) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.1.2.3:8082", "10.1.2.3:8082"),
        ("[fd00::1]:8082", "[fd00::1]:8082"),
        ("[fd00:0::1]:8082", "[fd00::1]:8082"),
        ("fd00::1:8082", None),  # IPv6 without brackets: where does the port start?
        ("[10.1.2.3]:8082", None),
        ("evil.example:8082", None),  # a Lease never makes the receiver look a name up
        ("10.1.2.3:8082/admin", None),
        ("http://10.1.2.3:8082", None),
        ("10.1.2.3", None),
        ("10.1.2.3:", None),
        ("10.1.2.3:0", None),
        ("10.1.2.3:123456", None),
        ("10.1.2.3:" + "1" * 100, None),
        ("", None),
        (None, None),
    ],
)
def test_a_peers_address_is_read_only_as_an_ip_and_a_port(
    text: str | None, expected: str | None
) -> None:
    assert parse_address(text) == expected
