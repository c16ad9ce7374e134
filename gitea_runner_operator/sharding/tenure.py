"""Which replica serves which capacity domain, and from when: rendezvous hashing over the
live members, fenced by what each member publishes in its own membership Lease.

Assignment: a domain goes to the member with the highest hash of (member, the domain's shard
bucket) (highest random weight, Thaler and Ravishankar; buckets: api/shard.py). Every domain
of a bucket has the same owner, so a replica holds whole buckets and its Job and Pod watches
can select them by label (kube/cache.py). A member that joins takes exactly the buckets whose
hash it wins; a member that leaves gives away only its own. No table is stored: every
replica computes the same owner from the same member set.

Fencing: replicas see one another through their Leases, each read at its own time, so two
of them may for a while disagree on who is alive. The rule that keeps two replicas off one
domain (the proof is in docs/architecture.md, "Past one replica"):

1. Each member publishes, in its Lease, the member set it acts for (its view) and the
   fingerprint of the groups it computed domains from (domains.fingerprint).
2. Before it publishes a new view or fingerprint, a member stops acting on every domain the
   new one does not give it (and on every domain whose membership changed).
3. A member starts acting on a domain only on a read of the Leases begun after its own last
   publication, in which every other fresh member publishes the same fingerprint and a view
   that gives the domain to it too. Members whose Lease lapsed or was released are not
   asked: client-go's rule makes a member stop acting before others can see its Lease lapse
   (it steps down after ``renew_deadline``, shorter than the duration), and a released
   Lease is released only after its member stopped.
4. A member that stepped down (could not renew in time) holds nothing and must publish
   again before it takes anything.

Liveness, not safety: a member that has never held a domain and reads no other member
waits ``settle_reads`` reads before it takes anything (:attr:`Tenure.settle_reads`).
Replicas of a Deployment start within seconds of one another; without the wait, the first
one up takes every domain, starts every group's work and hands most of it away a few
seconds later, and a Python process keeps the memory of that peak for good.

Pure: :class:`Tenure` is one member's state; the Lease I/O is sharding/leases/membership.py.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gitea_runner_operator.api.placement import Placement
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.api.shard import shard_of
from gitea_runner_operator.sharding.domains import (
    Shape,
    domains,
    fingerprint,
    lone_domain,
)

ANNOTATION = "gitea-runners.dev/view"  # on each member's Lease: the Published record
# 2: owners bid for a domain's shard bucket (format 1 bid for the domain itself). A replica
# reads a record of another format as unreadable, which blocks its every gain (rule 3):
# replicas of the two schemes never both act on a domain, and during a rolling upgrade from
# format 1 no domain is taken until every replica runs format 2 (those released meanwhile
# wait for it).
_FORMAT = 2
MAX_MEMBERS = 64  # a view longer than this is refused when read (a Lease is shared input)


def weight(member: str, bucket: int) -> int:
    """The member's bid for a shard bucket: the first 8 bytes of a hash of both."""
    digest = hashlib.sha256(f"{member}\x00{bucket}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def owner(domain: str, members: Collection[str]) -> str | None:
    """The domain's owner among ``members``: the owner of its shard bucket (ties, which need
    a hash collision, go to the larger name); None when there is nobody."""
    if not members:
        return None
    bucket = shard_of(domain)
    return max(members, key=lambda m: (weight(m, bucket), m))


def assignment(domain_ids: Iterable[str], members: Collection[str]) -> dict[str, str]:
    """Each domain's owner; empty when there are no members."""
    if not members:
        return {}
    return {d: owner(d, members) or "" for d in domain_ids}


@dataclass(frozen=True, slots=True)
class Layout:
    """The domains one member computed, and the fingerprint of the groups it read."""

    fingerprint: str
    domains: Mapping[str, frozenset[str]]  # domain id -> its group keys
    # Domains that span a whole Gitea (a scope: global group joined its families): shown in
    # the groups' status, never part of the fingerprint (the keys already decide it).
    whole_gitea: frozenset[str] = frozenset()
    # Domains of one global group on probation (domains.Shape.widens): its replica must
    # create nothing for it.
    probation: frozenset[str] = frozenset()
    # Group key -> domain id, made once: every webhook delivery for a group served elsewhere
    # asks it (runtime/controller.split), and a layout holds thousands of groups.
    _by_key: Mapping[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_key = {key: d for d, keys in self.domains.items() for key in keys}
        object.__setattr__(self, "_by_key", MappingProxyType(by_key))

    @classmethod
    def of(cls, shapes: Iterable[Shape], unreadable: Iterable[str] = ()) -> Layout:
        """From the groups' shapes; groups whose spec cannot be read each get a domain of
        their own (they compete with nobody), and take part in the fingerprint by key."""
        listed = list(shapes)
        computed = domains(listed).values()
        found = {d.id: d.members for d in computed}
        whole = frozenset(d.id for d in computed if d.whole_gitea)
        pending = {s.key for s in listed if s.scope is Scope.GLOBAL and not s.widens}
        probation = frozenset(d.id for d in computed if d.members <= pending)
        odd = sorted(unreadable)
        for key in odd:
            found.setdefault(lone_domain(key).id, frozenset({key}))
        print_ = fingerprint(listed)
        if odd:
            print_ = hashlib.sha256("\x1e".join([print_, *odd]).encode()).hexdigest()[:16]
        return cls(print_, found, whole, probation)

    def domain_of(self) -> Mapping[str, str]:
        """Group key -> domain id (read-only, shared)."""
        return self._by_key

    def placement(self, domain: str, held: frozenset[str], me: str) -> Placement | None:
        """Where the groups of ``domain`` are served, as member ``me`` holding it with the
        groups ``held`` shows it; None once this layout has changed the domain, which is
        then about to be released (Tenure.plan): its groups' status is left as it is rather
        than written twice during the hand-over."""
        if not held or self.domains.get(domain) != held:
            return None
        return Placement(domain, me, domain in self.whole_gitea, domain in self.probation)


@dataclass(frozen=True, slots=True)
class Published:
    """What one member's Lease says it acts for."""

    view: frozenset[str]
    fingerprint: str

    def encode(self) -> str:
        return json.dumps(
            {"format": _FORMAT, "members": sorted(self.view), "groups": self.fingerprint},
            separators=(",", ":"),
        )

    @classmethod
    def decode(cls, text: str | None) -> Published | None:
        """None for anything this version cannot read: such a member blocks every gain
        (rule 3), which is the safe reading of a peer one does not understand."""
        if not text or len(text) > 64 * 1024:
            return None
        try:
            raw = json.loads(text)
        except ValueError:
            return None
        if not isinstance(raw, dict) or raw.get("format") != _FORMAT:
            return None
        members, groups = raw.get("members"), raw.get("groups")
        if not isinstance(members, list) or not isinstance(groups, str):
            return None
        if len(members) > MAX_MEMBERS or not all(isinstance(m, str) for m in members):
            return None
        return cls(frozenset(members), groups)


@dataclass(frozen=True, slots=True)
class Reading:
    """One read of every membership Lease, from one member's side: the other members whose
    Lease is held and fresh, and what each publishes (None: unreadable or not yet)."""

    fresh: Mapping[str, Published | None]
    publication: int  # the reader's own publication count when the read began
    # Seconds from the read's start until each fresh member's record would count as lapsed
    # were it to stay unchanged (objects/leases.Sightings): when to read again so a lapse
    # is seen when it falls due, and whose domains to read ahead (:func:`ahead`).
    lapse_in: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Step:
    """What a member must do after a read, in this order: stop acting on ``release``, then
    write ``publish`` to its Lease (and report it with :meth:`Tenure.published`), then act
    on ``take`` too."""

    release: frozenset[str] = frozenset()
    publish: Published | None = None
    take: frozenset[str] = frozenset()


@dataclass
class Tenure:
    """One member's right to domains."""

    me: str
    current: Published | None = None  # last written to its Lease
    publication: int = 0
    held: dict[str, frozenset[str]] = field(default_factory=dict)  # domain id -> group keys
    settle_reads: int = 0  # lone reads to wait, before its first take, for peers starting too
    _must_publish: bool = True
    _lone_reads: int = 0
    _ever_held: bool = False

    def plan(self, reading: Reading, layout: Layout) -> Step:
        """The next step after ``reading``, with the domains computed from the groups this
        member sees now (``layout``). Releases and gains are applied to :attr:`held` here;
        the publication counts only once :meth:`published` is called."""
        wanted = Published(frozenset({self.me, *reading.fresh}), layout.fingerprint)
        if self._must_publish or wanted != self.current:
            return Step(release=self._keep_only(wanted, layout), publish=wanted)
        if reading.publication != self.publication:
            return Step()  # read before our own last write: proves nothing about the others
        peers = list(reading.fresh.values())
        if any(p is None or p.fingerprint != layout.fingerprint for p in peers):
            return Step()
        if not self._ever_held and not peers and self._lone_reads < self.settle_reads:
            self._lone_reads += 1  # alone so far: peers starting with us may not have written
            return Step()
        take = frozenset(
            d
            for d, keys in layout.domains.items()
            if d not in self.held
            and owner(d, wanted.view) == self.me
            and all(owner(d, p.view) == self.me for p in peers if p is not None)
        )
        self.held.update({d: layout.domains[d] for d in take})
        self._ever_held = self._ever_held or bool(take)
        return Step(take=take)

    def published(self, what: Published) -> None:
        self.current = what
        self.publication += 1
        self._must_publish = False

    def step_down(self) -> frozenset[str]:
        """The Lease could not be renewed in time (or the process stops): act on nothing,
        and publish again before taking anything."""
        released = frozenset(self.held)
        self.held.clear()
        self._must_publish = True
        return released

    def drop(self, keys: Collection[str]) -> frozenset[str]:
        """Stop holding the domains of ``keys`` (their fetch failed): the view stays, so the
        next plan takes them again, which is the retry; returns the domains dropped."""
        lost = frozenset(d for d, members in self.held.items() if members & set(keys))
        for d in lost:
            del self.held[d]
        return lost

    def groups(self) -> frozenset[str]:
        """The groups this member may act on now."""
        return frozenset(key for keys in self.held.values() for key in keys)

    def _keep_only(self, wanted: Published, layout: Layout) -> frozenset[str]:
        lost = frozenset(
            d
            for d, keys in self.held.items()
            if layout.domains.get(d) != keys or owner(d, wanted.view) != self.me
        )
        for d in lost:
            del self.held[d]
        return lost


def ahead(
    me: str, reading: Reading, layout: Layout, held: Collection[str], fading: Collection[str]
) -> frozenset[str]:
    """The domains ``me`` does not hold that the members of ``reading``, less ``fading``
    (those about to lapse), give it: what it expects to take next. Reading a domain's Jobs
    and Pods gives no right to act on it (rule 3 alone does), so that reading may begin
    before the take, and the take need not wait for it."""
    members = frozenset({me, *reading.fresh}) - frozenset(fading)
    return frozenset(d for d in layout.domains if d not in held and owner(d, members) == me)


@dataclass
class Arrivals:
    """Since when each domain this member is to inherit has waited for it: a domain whose
    owner among the members of one read has left them by a later read (released or lapsed)
    and that the later members give to ``me``. Times are the caller's clock at the read
    that first showed the owner gone; :meth:`served` gives the waits of those now served."""

    me: str
    members: frozenset[str] | None = None  # the previous read's, ``me`` included
    since: dict[str, float] = field(default_factory=dict)

    def read(self, reading: Reading, layout: Layout, now: float) -> None:
        before, after = self.members, frozenset({self.me, *reading.fresh})
        self.members = after
        gone = before - after if before is not None else frozenset()
        for d in layout.domains if gone else ():
            if owner(d, before or ()) in gone and owner(d, after) == self.me:
                self.since.setdefault(d, now)
        # A domain that another change gave to someone else waits for this member no more.
        for d in [d for d in self.since if d not in layout.domains or owner(d, after) != self.me]:
            del self.since[d]

    def served(self, domains: Iterable[str], now: float) -> list[float]:
        return [now - self.since.pop(d) for d in domains if d in self.since]

    def forget(self) -> None:
        """This member stepped down: what waits now waits for its return, not a hand-over."""
        self.since.clear()
