"""How many runners to add, which to reap, and which registrations to drop.

Everything here is a pure function of plain data: the runner Jobs the cluster has now and what
Gitea says now. No clock is read and nothing is remembered, so the same inputs give the same
plan after a restart, on a second replica, or on a test machine.

The rule, and why:
- demand is the number of *queued* jobs whose every ``runs-on`` label the group offers: the
  jobs Gitea would hand to one of our runners (blocked jobs are ``waiting`` and are not demand);
- a runner that has not yet taken a job (Pod still starting, or registered and idle) will take
  one of those queued jobs, so it already covers one unit of demand. Counting it is what stops
  a Pod that needs 60 s to start from earning a second runner on every poll in between;
- ``alive`` runners can never exceed ``maxActiveRunners``;
- so ``new = max(0, min(demand - not_busy, max_active - alive))``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from gitea_runner_operator.forge.models import ActionJob, ActionRunner
from gitea_runner_operator.kube.views import RunnerJobView


class RunnerState(StrEnum):
    STARTING = "starting"  # no runner registered under any of its Pods' names yet
    IDLE = "idle"  # registered, no job taken
    BUSY = "busy"  # running (or has run) its one job
    GONE = "gone"  # Job finished or being deleted: holds no slot


def matches(job_labels: Iterable[str], offered: frozenset[str]) -> bool:
    """Gitea hands a job to a runner only if *all* its ``runs-on`` labels are the runner's."""
    return set(job_labels) <= offered


def matching_demand(jobs: Iterable[ActionJob], offered: frozenset[str]) -> list[ActionJob]:
    """Queued jobs this group's runners can take. Status is re-checked in case a server
    ignores the filter."""
    return [job for job in jobs if job.status == "queued" and matches(job.labels, offered)]


def runner_state(view: RunnerJobView, runners_by_name: Mapping[str, ActionRunner]) -> RunnerState:
    if not view.alive:
        return RunnerState.GONE
    if view.took_job:
        # An ephemeral runner takes one job; once it has, it never covers demand again.
        return RunnerState.BUSY
    registered = [runners_by_name[p] for p in view.pod_names if p in runners_by_name]
    if any(r.busy for r in registered):
        return RunnerState.BUSY
    if registered:
        return RunnerState.IDLE
    return RunnerState.STARTING


def desired_new_runners(*, demand: int, alive: int, not_busy: int, max_active: int) -> int:
    """The capacity rule, kept alone so it can be read and tested on its own."""
    return max(0, min(demand - not_busy, max_active - alive))


@dataclass(frozen=True, slots=True)
class Observation:
    """What Gitea said at one moment. ``runners_complete`` is False when pagination was cut
    short, in which case nobody is reaped (a runner we did not see may be busy)."""

    queued: tuple[ActionJob, ...]
    runners: tuple[ActionRunner, ...]
    runners_complete: bool = True


@dataclass(frozen=True, slots=True)
class Plan:
    create: int
    reap: tuple[str, ...] = ()
    deregister: tuple[int, ...] = ()
    mark_took_job: tuple[str, ...] = ()
    demand: int = 0
    alive: int = 0
    not_busy: int = 0
    states: Mapping[str, RunnerState] = field(default_factory=dict)


def runner_name_pattern(group_name: str) -> re.Pattern[str]:
    """Pod names of a group's runners: ``{group}-{5}`` from generateName, then ``-{5}`` from
    the Job controller. Used to recognise our registrations whose Pod is long gone."""
    return re.compile(rf"^{re.escape(group_name)}-[a-z0-9]{{5}}-[a-z0-9]{{5}}$")


def plan(
    *,
    group_name: str,
    jobs: Sequence[RunnerJobView],
    observation: Observation,
    offered: frozenset[str],
    max_active: int,
    idle_timeout: float,
    now: float,
    pending_creations: int = 0,
) -> Plan:
    """Decide one reconcile pass.

    ``pending_creations`` counts Jobs this process created that the informer has not shown
    yet; they hold a slot and cover demand exactly like a starting runner.
    """
    runners_by_name = {r.name: r for r in observation.runners}
    states = {view.name: runner_state(view, runners_by_name) for view in jobs}

    alive_views = [v for v in jobs if states[v.name] is not RunnerState.GONE]
    alive = len(alive_views) + pending_creations
    not_busy = pending_creations + sum(
        1 for v in alive_views if states[v.name] in (RunnerState.STARTING, RunnerState.IDLE)
    )
    demand = len(matching_demand(observation.queued, offered))

    reap: list[str] = []
    deregister: list[int] = []
    if observation.runners_complete:
        for view in alive_views:
            if states[view.name] in (RunnerState.STARTING, RunnerState.IDLE) and (
                now - view.created_at > idle_timeout
            ):
                reap.append(view.name)
                deregister.extend(
                    runners_by_name[p].id for p in view.pod_names if p in runners_by_name
                )
        deregister.extend(_orphans(group_name, jobs, observation.runners))

    # Reaped runners free their slots only once deleted; the next pass sees that.
    create = desired_new_runners(
        demand=demand, alive=alive, not_busy=not_busy, max_active=max_active
    )
    mark = tuple(
        v.name for v in alive_views if states[v.name] is RunnerState.BUSY and not v.took_job
    )
    return Plan(
        create=create,
        reap=tuple(reap),
        deregister=tuple(sorted(set(deregister))),
        mark_took_job=mark,
        demand=demand,
        alive=alive,
        not_busy=not_busy,
        states=states,
    )


def group_registrations(group_name: str, runners: Iterable[ActionRunner]) -> list[ActionRunner]:
    """Ephemeral registrations named like this group's runner Pods."""
    pattern = runner_name_pattern(group_name)
    return [r for r in runners if r.ephemeral and pattern.match(r.name)]


def _orphans(
    group_name: str, jobs: Sequence[RunnerJobView], runners: Iterable[ActionRunner]
) -> list[int]:
    """Offline registrations of the group whose Pod no longer runs: a runner that died before
    taking a job leaves one behind, and Gitea never removes it."""
    live_pods = {p for v in jobs if v.alive for p in v.pod_names}
    return [
        r.id
        for r in group_registrations(group_name, runners)
        if not r.online and not r.busy and r.name not in live_pods
    ]
