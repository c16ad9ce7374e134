"""``--sharding``: which replica a webhook delivery's groups are served by, so that the replica
Gitea happened to reach can hand the delivery to the one that acts on it.

The chart's Service spreads Gitea's deliveries over every replica, and a replica acts only on
the capacity domains it holds (sharding/tenure.py). Without a hand-over, a delivery that lands
on the wrong replica wakes nothing and the job waits for the next poll. So each member
publishes in its membership Lease where it receives webhooks (:data:`WEBHOOK_ANNOTATION`), and
the receiver asks :func:`split` where each group it routed to is served.

Who serves a domain is computed as Tenure.plan computes its own view: the owner among this
replica and the live members of its latest read. During a hand-over that answer may name a
replica that does not act on the domain yet; the forward then wakes nothing there, which costs
what the delivery would have cost without forwarding (the next poll finds the job). Pure.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from gitea_runner_operator.sharding.tenure import owner

# On each member's Lease: ``<ip>:<port>`` (``[<ipv6>]:<port>``) where it receives webhooks;
# absent when the member receives none (webhooks off, or no Pod IP to offer).
WEBHOOK_ANNOTATION: Final = "gitea-runners.dev/webhook"
_MAX_ADDRESS: Final = 64  # "[" + the longest IPv6 text + "]:65535" fits with room to spare


def address(ip: str | None, port: int) -> str | None:
    """Where peers reach this replica's receiver: ``ip`` (a Pod IP) and ``port``; None when
    there is nothing usable to offer (no IP, not an IP, port 0: webhooks off)."""
    if not ip or not 0 < port < 65536:
        return None
    try:
        parsed = ipaddress.ip_address(ip.strip())
    except ValueError:
        return None
    if parsed.version == 6:
        return f"[{parsed.compressed}]:{port}"
    return f"{parsed.compressed}:{port}"


def parse_address(text: str | None) -> str | None:
    """A peer's published address, if it is an IP literal and a port: a Lease is input anyone
    with write access to Leases in the namespace could shape, so no host name (no DNS lookup
    on its say-so) and no path or scheme can come in through it. Returned normalised."""
    if not text or len(text) > _MAX_ADDRESS:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or len(port) > 5:
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if ":" not in host:
            return None
    elif ":" in host:
        return None  # an IPv6 address is written in brackets
    return address(host, int(port))


@dataclass(frozen=True, slots=True)
class Split:
    """Where the groups a delivery was routed to are served: ``here`` (woken on this replica),
    ``peers`` (a peer's address -> its groups: one forward each), ``unreachable`` (served by a
    live member that publishes no address: only its next poll finds the job)."""

    here: tuple[str, ...] = ()
    peers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    unreachable: tuple[str, ...] = ()


def split(
    keys: Iterable[str],
    *,
    serves: Callable[[str], bool],
    domain_of: Mapping[str, str],
    me: str,
    peers: Mapping[str, str | None],
) -> Split:
    """Where each of ``keys`` is served. ``serves(key)``: this replica acts on it now;
    ``domain_of``: group key -> capacity domain, as this replica computed them; ``peers``:
    the other live members -> their published webhook address (None: none).

    A group is woken here when this replica serves it, when its domain is unknown here (a
    group the layout has not seen yet), or when this replica is its owner (it is about to
    take it): waking a group one does not act on only queues it, which is harmless."""
    members = frozenset({me, *peers})
    here: list[str] = []
    elsewhere: dict[str, list[str]] = {}
    unreachable: list[str] = []
    for key in dict.fromkeys(keys):
        domain = domain_of.get(key)
        serving = None if serves(key) or domain is None else owner(domain, members)
        if serving is None or serving == me:
            here.append(key)
        elif (where := peers.get(serving)) is not None:
            elsewhere.setdefault(where, []).append(key)
        else:
            unreachable.append(key)
    return Split(tuple(here), {a: tuple(k) for a, k in elsewhere.items()}, tuple(unreachable))
