"""Who competes with whom for a Gitea's queued jobs: the families of groups.

A family is a connected set of groups on one Gitea instance whose scopes nest (global >
org > repo) and whose labels intersect: only those can count the same job, so only those
are weighed together. One rule for two readers: the ledger (reconcile/capacity/ledger.py)
keeps one assignment per family, and the sharding builds its domains from the families
(sharding/domains.py), so the accounting and the sharding cannot disagree on who competes.
"""

from __future__ import annotations

from collections.abc import Mapping

from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.api.scope import fold
from gitea_runner_operator.reconcile.capacity.members import Member


def families(members: Mapping[str, Member]) -> dict[str, frozenset[str]]:
    """Each group's family: groups joined when their scopes nest and labels intersect
    (groups that do not couple, :attr:`Member.couples`, stay alone).

    Union-find over one representative per (instance, scope target, label), linking each
    level to the levels that contain it: linear in groups times labels."""
    parent = {key: key for key in members}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    repo_rep: dict[tuple[str, str, str, str], str] = {}
    org_rep: dict[tuple[str, str, str], str] = {}
    global_rep: dict[tuple[str, str], str] = {}
    for key in sorted(members):
        if not members[key].couples:
            continue
        c = members[key].claimant
        url, org, repo = members[key].url, fold(c.org), fold(c.repo)
        for label in c.offered:
            if c.scope is Scope.REPO:
                union(key, repo_rep.setdefault((url, org, repo, label), key))
            elif c.scope is Scope.ORG:
                union(key, org_rep.setdefault((url, org, label), key))
            else:
                union(key, global_rep.setdefault((url, label), key))
    for (url, org, _repo, label), rep in repo_rep.items():
        if (above := org_rep.get((url, org, label))) is not None:
            union(rep, above)
        if (top := global_rep.get((url, label))) is not None:
            union(rep, top)
    for (url, _org, label), rep in org_rep.items():
        if (top := global_rep.get((url, label))) is not None:
            union(rep, top)
    grouped: dict[str, set[str]] = {}
    for key in members:
        grouped.setdefault(find(key), set()).add(key)
    out: dict[str, frozenset[str]] = {}
    for keys in grouped.values():
        family = frozenset(keys)
        for key in keys:
            out[key] = family
    return out
