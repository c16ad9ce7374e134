"""Capacity domains: the sets of groups that must be served by one replica.

The exact accounting (accounting.py) hands each queued job to one group among all that could
take it, and it can only do so where all of them are counted together: the families
(reconcile/capacity/families.py: same Gitea, nesting scopes, a label in common). A domain
is a family, with one widening: a ``scope: global`` group joins every family of its Gitea
into one domain, once it is admitted and its polls work (:attr:`Shape.widens`). A global
group may take jobs of any repository, so its family already reaches every group with
which it shares a label; making it the whole Gitea keeps a domain put when someone adds a
label to the global group or to a peer, so a label edit does not move half a Gitea between
replicas (docs/decisions/0005-sharding-by-capacity-domain.md).

Domains are a pure function of every group's Gitea URL, scope and labels, so every replica
that sees the same groups computes the same domains; :func:`fingerprint` names that input,
so replicas can tell whether they agree on it (sharding/tenure.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gitea_runner_operator.api.credentials import normalise_url
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec, Scope
from gitea_runner_operator.api.scope import fold
from gitea_runner_operator.api.shard import domain_id
from gitea_runner_operator.reconcile.capacity.accounting import Claimant
from gitea_runner_operator.reconcile.capacity.families import families
from gitea_runner_operator.reconcile.capacity.members import Member


@dataclass(frozen=True, slots=True)
class Shape:
    """What decides a group's domain, and nothing else (a replica count or a pod template
    edit moves no group)."""

    key: str  # namespace/name
    url: str  # normalised Gitea URL
    scope: Scope
    org: str | None
    repo: str | None
    labels: frozenset[str]
    # A global group joins every family of its Gitea only once it is admitted and its polls
    # work (its status reads Ready=True). Until then it is on probation: a domain of its
    # own, whose replica polls it but creates nothing (Placement.probation), so a tenant's
    # global group with a token that does not work moves no other group. Its first Ready
    # joins it to the Gitea's domain on every replica alike (the status is what they share).
    widens: bool = True


def shape_of(key: str, spec: RunnerGroupSpec, *, widens: bool = True) -> Shape:
    return Shape(
        key=key,
        url=normalise_url(spec.gitea.url),
        scope=spec.scope,
        org=fold(spec.org) if spec.org is not None else None,
        repo=fold(spec.repo) if spec.repo is not None else None,
        labels=spec.label_names,
        widens=widens and spec.scope is Scope.GLOBAL,
    )


@dataclass(frozen=True, slots=True)
class Domain:
    id: str  # stable while its smallest member stays
    members: frozenset[str]
    whole_gitea: bool  # a global-scope group joined every family of its Gitea


def lone_domain(key: str) -> Domain:
    """The domain of a group whose spec cannot be read: it competes with nobody."""
    return Domain(domain_id([key]), frozenset({key}), whole_gitea=False)


def domains(shapes: Iterable[Shape]) -> dict[str, Domain]:
    """Each group's domain, by group key. The families come from the accounting's own rule
    (capacity/families.py), so the accounting and the sharding cannot disagree on who
    competes."""
    by_key = {s.key: s for s in shapes}
    members = {
        key: Member(
            s.url,
            Claimant(key, s.scope, s.org, s.repo, s.labels, not_busy=0, spare=0),
            answer=None,
        )
        for key, s in by_key.items()
    }
    out: dict[str, Domain] = {}
    for key in [k for k, s in by_key.items() if s.scope is Scope.GLOBAL and not s.widens]:
        out[key] = lone_domain(key)  # on probation: competes with nobody yet
        del by_key[key], members[key]
    merged: dict[str, set[str]] = {}  # URL -> every group of that Gitea, when one is global
    for s in by_key.values():
        if s.scope is Scope.GLOBAL and s.widens:
            merged.setdefault(s.url, set())
    for s in by_key.values():
        if s.url in merged:
            merged[s.url].add(s.key)
    for keys in merged.values():
        whole = Domain(domain_id(keys), frozenset(keys), whole_gitea=True)
        out.update(dict.fromkeys(keys, whole))
    rest = {key: m for key, m in members.items() if by_key[key].url not in merged}
    for key, family in families(rest).items():
        if key not in out:
            domain = Domain(domain_id(family), family, whole_gitea=False)
            out.update(dict.fromkeys(family, domain))
    return out


def fingerprint(shapes: Mapping[str, Shape] | Iterable[Shape]) -> str:
    """A short name for the set of shapes: replicas whose fingerprints agree compute the
    same domains."""
    items = shapes.values() if isinstance(shapes, Mapping) else shapes
    h = hashlib.sha256()
    for s in sorted(items, key=lambda s: s.key):
        fields = (s.key, s.url, s.scope.value, s.org or "", s.repo or "", *sorted(s.labels))
        if s.scope is Scope.GLOBAL and not s.widens:  # absent otherwise: as older replicas
            fields = (*fields, "\x1dpending")
        h.update("\x1f".join(fields).encode())
        h.update(b"\x1e")
    return h.hexdigest()[:16]
