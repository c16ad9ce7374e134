"""The layout's input, read from the RunnerGroups as the informer cache holds them: each
group's shape (sharding/domains.Shape), parsed once per uid and generation.

A layout is recomputed whenever a group's spec changes; parsing every group's spec each time
let one tenant who toggles a finalizer on a few maximum-size groups cost the loop a second
per toggle among a thousand groups. The parse is the admission's (reconcile/steps/admission.py),
remembered by uid and generation, so a change costs the changed group's parse only, and a
group the platform refuses (its namespace, its template, ``scope: global`` outside
``--global-scope-namespace``) competes with nobody: it creates nothing, so it has a domain
of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gitea_runner_operator.api.template_policy import TemplatePolicy
from gitea_runner_operator.reconcile.capacity.accounting import Claimant
from gitea_runner_operator.reconcile.steps.admission import Admissions
from gitea_runner_operator.sharding.domains import Shape, shape_of
from gitea_runner_operator.sharding.tenure import Layout

_GLOBAL = "global"


def polls_work(obj: Mapping[str, Any] | None) -> bool:
    """Whether the group's status says its polls work (``Ready=True``): what every replica
    reads alike, since the serving replica writes it."""
    status = (obj or {}).get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for c in conditions if isinstance(conditions, list) else ():
        if isinstance(c, Mapping) and c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def _is_global(obj: Mapping[str, Any] | None) -> bool:
    spec = (obj or {}).get("spec")
    return isinstance(spec, Mapping) and spec.get("scope") == _GLOBAL


def widening_changed(obj: Mapping[str, Any] | None, before: Mapping[str, Any] | None) -> bool:
    """Whether a status change of a global group changes the layout (its polls began or
    stopped working); any other status change does not, and costs no recomputation."""
    return _is_global(obj) and polls_work(obj) != polls_work(before)


class ShapeMemo:
    """Each group's shape by uid and generation, made through admission's verdict (its memo
    answers for the groups this replica serves and has admitted already). Only the shape is
    kept here, not the parsed spec: a replica reads every group for the layout and serves a
    share of them."""

    def __init__(self, admissions: Admissions | None = None) -> None:
        self._admissions = (
            admissions if admissions is not None else Admissions(TemplatePolicy(), None)
        )
        self._memo: dict[str, tuple[str, int, Shape | None]] = {}

    def __len__(self) -> int:
        return len(self._memo)

    def shape(self, key: str, obj: Mapping[str, Any] | None, *, keep: bool = False) -> Shape | None:
        """The group's shape; None when its spec cannot be read or it is refused (it
        competes with nobody). ``keep``: the group is served here, so admission's memo keeps
        the verdict for its passes too."""
        raw = obj or {}
        meta = raw.get("metadata") or {}
        uid, generation = str(meta.get("uid") or ""), meta.get("generation")
        known = self._memo.get(key)
        if known is not None and (known[0], known[1]) == (uid, generation):
            base = known[2]
        else:
            verdict = self._admissions.admit(key, meta, raw.get("spec"), keep=keep)
            ok = verdict.spec is not None and verdict.refusal is None
            base = shape_of(key, verdict.spec) if ok and verdict.spec is not None else None
            if isinstance(generation, int):
                self._memo[key] = (uid, generation, base)
        if base is None or not base.widens or polls_work(raw):
            return base
        return dataclasses.replace(base, widens=False)  # a global group on probation

    def forget(self, key: str) -> None:
        self._memo.pop(key, None)
        self._admissions.forget(key)


def shapes_of(
    groups: Iterable[tuple[str, Any]],
    memo: ShapeMemo | None = None,
    served: Callable[[str], bool] | None = None,
) -> tuple[list[Shape], list[str]]:
    """The shapes of ``(key, object)`` pairs, and the keys of those whose spec cannot be
    read or that are refused (without ``memo`` every spec is parsed)."""
    memo = memo if memo is not None else ShapeMemo()
    shapes: list[Shape] = []
    odd: list[str] = []
    for key, obj in groups:
        found = memo.shape(key, obj, keep=served is not None and served(key))
        if found is None:
            odd.append(key)
        else:
            shapes.append(found)
    return shapes, odd


def layout_of(groups: Iterable[tuple[str, Any]], admissions: Admissions | None = None) -> Layout:
    """The domains of ``(key, object)`` pairs (:func:`shapes_of`). A group whose spec cannot
    be read, or that is refused, competes with nobody (its own domain)."""
    shapes, odd = shapes_of(groups, ShapeMemo(admissions))
    return Layout.of(shapes, odd)


def offers(shapes: Iterable[Shape]) -> dict[str, list[Claimant]]:
    """By Gitea URL, what each group offers (its scope and labels, no capacity): what the
    unmatched-jobs evaluation needs of the groups other replicas serve."""
    out: dict[str, list[Claimant]] = {}
    for s in shapes:
        claimant = Claimant(s.key, s.scope, s.org, s.repo, s.labels, not_busy=0, spare=0)
        out.setdefault(s.url, []).append(claimant)
    return out
