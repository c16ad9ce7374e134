"""Why one job waits, explained from the RunnerGroups as the cluster shows them: the pure
half of ``gitea-runner-operator why <job URL>``.

It applies the operator's own rules, offline, to one job: label match and scope covering
(:class:`accounting.Claimant`), the family's choice of group (:func:`accounting.assign`), and
unmatched jobs (:func:`unmatched.find_unmatched`). The groups' room is read back from their
status (runners starting and idle, active runners, conditions), so the answer is the one the
operator would give for this job alone; with other jobs queued, the status's own
``waiting`` figures say how the group's jobs share out.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gitea_runner_operator.api.credentials import normalise_url
from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec, Scope
from gitea_runner_operator.reconcile.capacity.accounting import (
    _SPECIFICITY,  # the family rule's order of scopes: read, not restated
    Claimant,
    assign,
    job_repository,
)
from gitea_runner_operator.reconcile.status.conditions import find_condition
from gitea_runner_operator.reconcile.why.unmatched import (
    Cause,
    Offer,
    Sighting,
    find_unmatched,
    nearest_label,
    real_time,
)

READY = "Ready"
RUNNERS_HEALTHY = "RunnersHealthy"


@dataclass(frozen=True, slots=True)
class GroupView:
    """One RunnerGroup as read from the cluster; ``spec`` None when it is invalid."""

    key: str
    spec: RunnerGroupSpec | None
    status: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Explanation:
    job: ActionJob
    gitea: str
    could: tuple[str, ...]  # groups whose scope covers the job and whose labels match it
    should: str | None  # the one the family's rule picks
    passed_over: tuple[str, ...]  # more specific groups with no room for it now
    why_not: tuple[tuple[str, str], ...]  # (group, why it cannot) for the other groups
    holds: tuple[str, ...]  # what holds the job back, in order of what to fix first
    verdict: str
    coming: tuple[str, ...] = ()  # runners on their way for it (not a hold)
    served: str | None = None  # the chosen group's domain and replica (--sharding)


def claimant(view: GroupView) -> Claimant:
    """The group as the accounting sees it, its room read from its status: only a Ready and
    healthy group has spare capacity (the operator gives a group that cannot create none)."""
    assert view.spec is not None
    spec, status = view.spec, view.status
    runners = status.get("runners") or {}
    healthy = all(
        find_condition(status, kind).get("status", "True") == "True"
        for kind in (READY, RUNNERS_HEALTHY)
    )
    return Claimant.of(
        view.key,
        spec,
        not_busy=int(runners.get("starting") or 0) + int(runners.get("idle") or 0),
        alive=int(status.get("activeRunners") or 0),
        blocked=not healthy,
    )


def explain(job: ActionJob, gitea: str, groups: Sequence[GroupView]) -> Explanation:
    """Which groups could serve ``job`` of the Gitea at ``gitea``, which should, and what
    holds it back."""
    url = normalise_url(gitea)
    mine = [g for g in groups if g.spec is not None and normalise_url(g.spec.gitea.url) == url]
    claimants = {g.key: claimant(g) for g in mine}
    repository = job_repository(job)
    could = [c for c in claimants.values() if c.covers(repository) and c.can_run(job)]
    why_not = tuple((c.key, _why_not(c, job, repository)) for c in claimants.values()
                    if c not in could)  # fmt: skip
    should: str | None = None
    passed_over: tuple[str, ...] = ()
    if could:
        queued = job.model_copy(update={"status": "queued"})
        should = next(key for key, jobs in assign([queued], could).items() if jobs)
        chosen = claimants[should]
        passed_over = tuple(sorted(
            c.key for c in could
            if _SPECIFICITY[c.scope] > _SPECIFICITY[chosen.scope]
        ))  # fmt: skip
    views = {g.key: g for g in mine}
    holds = _job_state(job) + (_holds(views[should]) if should is not None else ())
    coming = _coming(views[should]) if should is not None and not holds else ()
    return Explanation(
        job=job,
        gitea=url,
        could=tuple(sorted(c.key for c in could)),
        should=should,
        passed_over=passed_over,
        why_not=tuple(sorted(why_not)),
        holds=holds,
        verdict=_verdict(job, url, should, holds, list(claimants.values())),
        coming=coming,
        served=_served(views[should].status) if should is not None else None,
    )


def _served(status: Mapping[str, Any]) -> str | None:
    """Which replica serves the group, from its status (only a sharded operator says)."""
    domain = status.get("domain") or {}
    if not domain.get("id") or not domain.get("servedBy"):
        return None
    spans = (
        "every RunnerGroup of its Gitea, as a scope: global group joins all its families"
        if domain.get("spans") == "gitea"
        else "the groups that can take the same jobs"
    )
    return f"replica {domain['servedBy']}, domain {domain['id']} ({spans})"


def _why_not(c: Claimant, job: ActionJob, repository: tuple[str, str] | None) -> str:
    reasons = []
    if not c.covers(repository):
        target = {Scope.ORG: c.org, Scope.REPO: f"{c.org}/{c.repo}"}.get(c.scope, "*")
        where = "/".join(repository) if repository else "the job's repository"
        reasons.append(f"its scope ({c.scope.value} {target}) does not cover {where}")
    missing = sorted(set(job.labels) - c.offered)
    if missing:
        parts = []
        for label in missing:
            near = nearest_label(label, c.offered)
            parts.append(f"{label!r}" + (f" (it offers {near!r})" if near else ""))
        reasons.append("it does not offer " + ", ".join(parts))
    return "; ".join(reasons)


def _job_state(job: ActionJob) -> tuple[str, ...]:
    if job.status == "queued":
        return ()
    if job.status in ("waiting", "blocked"):
        return (
            f"the job is {job.status!r}, not queued: Gitea hands it to no runner until the "
            "jobs it needs finish (or its concurrency group frees up)",
        )
    runner = f" on runner {job.runner_name}" if job.runner_name else ""
    return (f"the job is {job.status!r}{runner}: it is not waiting for a runner",)


def _holds(view: GroupView) -> tuple[str, ...]:
    status, out = view.status, []
    for kind in (READY, RUNNERS_HEALTHY):
        cond = find_condition(status, kind)
        if cond.get("status") == "False":
            out.append(f"{view.key}: {kind}=False, {cond.get('reason')}: {cond.get('message')}")
    waiting = status.get("waiting") or {}
    held = waiting.get("heldBack") or {}
    if held.get("count"):
        out.append(
            f"{view.key}: {held['count']} job(s) held back ({held.get('condition')} "
            f"{held.get('reason')})"
        )
    if waiting.get("atCapacity"):
        assert view.spec is not None
        out.append(
            f"{view.key}: at maxActiveRunners ({status.get('activeRunners', 0)} of "
            f"{view.spec.max_active_runners} active), {waiting['atCapacity']} job(s) wait for "
            "a runner to end"
        )
    return tuple(out)


def _coming(view: GroupView) -> tuple[str, ...]:
    """Runners already on their way: nothing holds the job, it waits for one Pod start."""
    starting = (view.status.get("waiting") or {}).get("startingRunner")
    if not starting:
        return ()
    return (
        f"{view.key}: {starting} runner(s) starting or idle for its queued jobs; if they stay "
        "so, see kubectl get pods and the RunnersHealthy condition",
    )


def _verdict(
    job: ActionJob, url: str, should: str | None, holds: Sequence[str], offers: list[Claimant]
) -> str:
    if should is not None:
        if holds:
            return f"{should} should serve it; it is held back (see above)"
        return f"{should} should serve it; a runner should take it within a poll interval"
    if job.status != "queued":
        return "no RunnerGroup of this Gitea could serve it; it is not queued either"
    if not offers:
        return "unmatched: no RunnerGroup uses this Gitea (compare spec.gitea.url)"
    found = next(
        iter(find_unmatched([Sighting(url, "why", [job])], [Offer(url, c) for c in offers])),
        None,
    )
    if found is None:  # pragma: no cover - find_unmatched agrees with the rule above
        return "no RunnerGroup of this Gitea could serve it"
    if found.cause is Cause.SCOPE:
        return (
            f"unmatched: {', '.join(found.offered_by)} offer(s) runs-on "
            f"[{', '.join(found.labels)}] but no group's scope covers its repository"
        )
    hint = "".join(f"; did you mean {b!r} for {a!r}?" for a, b in found.nearest)
    return (
        f"unmatched: no RunnerGroup of this Gitea offers runs-on [{', '.join(found.labels)}]{hint}"
    )


def render(e: Explanation, now: dt.datetime) -> str:
    """The text ``why`` prints."""
    job = e.job
    repository = job_repository(job)
    lines = [
        f"Job {job.id}"
        + (f" ({job.name})" if job.name else "")
        + (f" in {'/'.join(repository)}" if repository else "")
        + f": {job.status}, runs-on [{', '.join(job.labels)}]"
    ]
    queued = real_time(job.created_at)
    if queued is not None:
        minutes = max(0, int((now - queued).total_seconds() // 60))
        lines.append(f"Queued at {queued.isoformat().replace('+00:00', 'Z')} ({minutes} min ago)")
    lines.append(f"Gitea: {e.gitea}")
    lines.append("Could serve it: " + (", ".join(e.could) or "none"))
    if e.should is not None:
        lines.append(f"Should serve it: {e.should} (the most specific scope, then spare capacity)")
        if e.passed_over:
            lines.append(
                f"  passed over: {', '.join(e.passed_over)}: no starting or idle runner and no "
                "room now (at maxActiveRunners, or not Ready or healthy)"
            )
        if e.served is not None:
            lines.append(f"  served by {e.served}")
    if e.why_not:
        lines.append("Cannot serve it:")
        lines.extend(f"  {key}: {why}" for key, why in e.why_not)
    if e.holds:
        lines.append("Holding it back:")
        lines.extend(f"  {line}" for line in e.holds)
    if e.coming:
        lines.append("On its way:")
        lines.extend(f"  {line}" for line in e.coming)
    lines.append(f"Verdict: {e.verdict}")
    return "\n".join(lines)
