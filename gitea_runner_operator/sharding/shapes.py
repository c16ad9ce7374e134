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

from collections.abc import Iterable, Mapping
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


def shapes_of(
    groups: Iterable[tuple[str, Any]], admissions: Admissions | None = None
) -> tuple[list[Shape], list[str]]:
    """The shapes of ``(key, object)`` pairs, and the keys of those whose spec cannot be
    read or that are refused; ``admissions`` remembers each parse by uid and generation
    (without it every spec is parsed)."""
    memo = admissions if admissions is not None else Admissions(TemplatePolicy(), None)
    shapes: list[Shape] = []
    odd: list[str] = []
    for key, obj in groups:
        raw = obj or {}
        meta = raw.get("metadata") or {}
        admitted = memo.admit(key, meta, raw.get("spec"))
        if admitted.spec is None or admitted.refusal is not None:
            odd.append(key)
            continue
        shapes.append(shape_of(key, admitted.spec, widens=polls_work(raw)))
    return shapes, odd


def layout_of(groups: Iterable[tuple[str, Any]], admissions: Admissions | None = None) -> Layout:
    """The domains of ``(key, object)`` pairs (:func:`shapes_of`). A group whose spec cannot
    be read, or that is refused, competes with nobody (its own domain)."""
    shapes, odd = shapes_of(groups, admissions)
    return Layout.of(shapes, odd)


def offers(shapes: Iterable[Shape]) -> dict[str, list[Claimant]]:
    """By Gitea URL, what each group offers (its scope and labels, no capacity): what the
    unmatched-jobs evaluation needs of the groups other replicas serve."""
    out: dict[str, list[Claimant]] = {}
    for s in shapes:
        claimant = Claimant(s.key, s.scope, s.org, s.repo, s.labels, not_busy=0, spare=0)
        out.setdefault(s.url, []).append(claimant)
    return out
