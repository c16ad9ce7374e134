"""Admission: what the platform does not let a group have (its namespace, its template),
checked before any Job exists and named by field; and the memo of each group's verdict."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gitea_runner_operator.api.observation import Problem, ProblemKind
from gitea_runner_operator.api.runnergroup import InvalidSpec, RunnerGroupSpec, Scope, parse_spec
from gitea_runner_operator.api.template_policy import TemplatePolicy
from gitea_runner_operator.api.template_policy import check as check_template_policy


def refused(
    meta: Mapping[str, Any],
    spec: RunnerGroupSpec,
    policy: TemplatePolicy,
    own_namespace: str | None,
    global_namespaces: frozenset[str] | None = None,
) -> Problem | None:
    """The reason the group is refused, or None. A refused group creates nothing, so it
    holds no share of its family's jobs and its poll task stops. ``global_namespaces``: the
    namespaces ``--global-scope-namespace`` lets use ``scope: global`` (None: any). A global
    group joins every family of its Gitea (sharding/domains.py), so it is the platform's to
    grant, not each tenant's to take."""
    if own_namespace is not None and meta.get("namespace") == own_namespace:
        return Problem(
            "NamespaceNotAllowed",
            f"RunnerGroups in the operator's own namespace ({own_namespace}) are "
            "refused: runner Pods there would run beside the operator and its credentials",
            ProblemKind.CONFIG,
        )
    namespace = str(meta.get("namespace") or "")
    if (
        spec.scope is Scope.GLOBAL
        and global_namespaces is not None
        and namespace not in global_namespaces
    ):
        return Problem(
            "GlobalScopeNotAllowed",
            f"spec.scope: global is allowed only in the namespaces named by the operator's "
            f"--global-scope-namespace; {namespace!r} is not one of them",
            ProblemKind.CONFIG,
        )
    refusal = check_template_policy(spec.template, spec.mode.value, policy)
    if refusal is not None:
        return Problem("TemplateNotAllowed", str(refusal), ProblemKind.CONFIG)
    return None


@dataclass(frozen=True, slots=True)
class Admitted:
    """A group's spec as parsed, and why it is not admitted: ``invalid`` (the spec does not
    parse; ``spec`` is None) or ``refusal`` (it parses, the platform refuses it)."""

    uid: str
    generation: int
    spec: RunnerGroupSpec | None
    invalid: Problem | None = None
    refusal: Problem | None = None


class Admissions:
    """The verdict of each group, remembered by uid and generation: the spec moves only
    with the generation, and passes come at the tenant's will (its own runner Pods' changes
    trigger them), so parsing and admitting on every pass let a 1 MiB spec cost the loop
    28-48 ms per pass. One entry per group; :meth:`forget` drops it with the group."""

    def __init__(
        self,
        policy: TemplatePolicy,
        own_namespace: str | None,
        global_namespaces: frozenset[str] | None = None,
    ) -> None:
        self._policy, self._own_namespace = policy, own_namespace
        self._global_namespaces = global_namespaces
        self._memo: dict[str, Admitted] = {}

    def __len__(self) -> int:
        return len(self._memo)

    def admit(
        self, key: str, meta: Mapping[str, Any], raw_spec: Any, *, keep: bool = True
    ) -> Admitted:
        """The group's verdict, from the memo when its uid and generation are the same.
        ``keep=False``: a verdict not in the memo is not added (the --sharding layout reads
        groups this replica does not serve, and keeps only their shape)."""
        uid, generation = str(meta.get("uid") or ""), meta.get("generation")
        known = self._memo.get(key)
        if (
            known is not None
            and isinstance(generation, int)
            and (known.uid, known.generation) == (uid, generation)
        ):
            return known
        verdict = self._verdict(uid, generation, meta, raw_spec)
        if isinstance(generation, int) and (keep or key in self._memo):
            self._memo[key] = verdict
        else:
            self._memo.pop(key, None)
        return verdict

    def forget(self, key: str) -> None:
        self._memo.pop(key, None)

    def knows(self, key: str) -> bool:
        return key in self._memo

    def _verdict(
        self, uid: str, generation: Any, meta: Mapping[str, Any], raw_spec: Any
    ) -> Admitted:
        gen = generation if isinstance(generation, int) else 0
        try:
            spec = parse_spec(raw_spec)
        except InvalidSpec as exc:
            return Admitted(
                uid, gen, None, invalid=Problem("InvalidSpec", exc.message, ProblemKind.CONFIG)
            )
        problem = refused(meta, spec, self._policy, self._own_namespace, self._global_namespaces)
        return Admitted(uid, gen, spec, refusal=problem)
