"""Admission: what the platform does not let a group have (its namespace, its template),
checked before any Job exists and named by field. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gitea_runner_operator.api.observation import Problem, ProblemKind
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.api.template_policy import TemplatePolicy
from gitea_runner_operator.api.template_policy import check as check_template_policy


def refused(
    meta: Mapping[str, Any],
    spec: RunnerGroupSpec,
    policy: TemplatePolicy,
    own_namespace: str | None,
) -> Problem | None:
    """The reason the group is refused, or None. A refused group creates nothing, so it
    holds no share of its family's jobs and its poll task stops."""
    if own_namespace is not None and meta.get("namespace") == own_namespace:
        return Problem(
            "NamespaceNotAllowed",
            f"RunnerGroups in the operator's own namespace ({own_namespace}) are "
            "refused: runner Pods there would run beside the operator and its credentials",
            ProblemKind.CONFIG,
        )
    refusal = check_template_policy(spec.template, spec.mode.value, policy)
    if refusal is not None:
        return Problem("TemplateNotAllowed", str(refusal), ProblemKind.CONFIG)
    return None
