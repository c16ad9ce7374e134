"""How many runners to add, which to reap, and which registrations to drop.

Everything here is a pure function of plain data: the runner Jobs the cluster has now and what
Gitea said at one moment. No clock is read and nothing is remembered, so the same inputs give
the same plan after a restart, on a second replica, or on a test machine.

The rule, and why:
- demand is the number of *queued* jobs whose every ``runs-on`` label the group offers: the
  jobs Gitea would hand to one of our runners (blocked jobs are ``waiting`` and are not demand);
- a runner that has not yet taken a job (Pod still starting, or registered and idle) will take
  one of those queued jobs, so it already covers one unit of demand. Counting it is what stops
  a Pod that needs 60 s to start from earning a second runner on every poll in between;
- ``alive`` runners can never exceed ``maxActiveRunners``;
- so ``new = max(0, min(demand - not_busy, max_active - alive))``.

Reaping is only *proposed* here. The per-group Gitea task carries it out, because it must
re-read each registration just before acting (a runner may take a job at any moment) and
that is a Gitea call, which a reconcile never waits for.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from gitea_runner_operator.api.gitea import ActionJob, ActionRunner
from gitea_runner_operator.api.naming import job_name_pattern, runner_pattern
from gitea_runner_operator.api.observation import Observation
from gitea_runner_operator.api.scope import labels_fit
from gitea_runner_operator.objects.views import RunnerJobView, slots_held

# A Job whose Pod has not even been created this long after the Job was is refused by
# something (quota, admission); an unschedulable Pod is worth reporting after this long.
NO_POD_GRACE = 60.0
UNSCHEDULABLE_GRACE = 120.0
# A node makes a Pod's sandbox in seconds; one that has not in a minute will not.
SANDBOX_GRACE = 60.0
# How long a runner may take to start (Pod scheduled, image pulled, registered) before it
# stops covering a job in its family's accounting (claims.py).
START_BOUND = 120.0
# How long a runner counts as on its way to its job: a wider group's runner made meanwhile
# could take that job first, so the wider group waits for it (capacity/races.py). A runner
# Pod starts in 5 to 10 s on a real node; a peer whose runners never ask for work holds a
# wider group back this long at most.
RACE_HOLD = 60.0
# While held so, the group asks Gitea again this often (its own answer shows the peer's job
# taken), instead of waiting a whole poll interval to learn it may create.
RACE_RECHECK = 2.0


class RunnerState(StrEnum):
    STARTING = "starting"  # no runner registered under any of its Pods' names yet
    IDLE = "idle"  # registered, no job taken
    BUSY = "busy"  # running (or has run) its one job
    GONE = "gone"  # Job finished or being deleted: holds no slot


class ReapReason(StrEnum):
    IDLE = "idle"  # registered, took no job within idleTimeout, and nothing matching queued
    IDLE_WITH_DEMAND = "idle_with_demand"  # idle although matching jobs are queued: misfit
    STARTUP_TIMEOUT = "startup_timeout"  # never registered within startupTimeout
    GROUP_DELETED = "group_deleted"  # not busy, and the group is being torn down
    WARM_RECYCLED = "warm_recycled"  # a warm runner past spec.warmRunnerMaxAge: replaced
    HANDLE_GONE = "handle_gone"  # Forgejo: the job its runner is bound to is no longer queued


@dataclass(frozen=True, slots=True)
class ReapCandidate:
    """A runner the plan would delete, if a fresh look at its registration agrees."""

    job_name: str
    reason: ReapReason
    pod_names: tuple[str, ...]
    runner_ids: tuple[int, ...]  # its registrations in the snapshot (empty while starting)


@dataclass(frozen=True, slots=True)
class Orphan:
    """A registration that is provably this group's and whose Pod no longer exists."""

    runner_id: int
    name: str
    # Normally only offline registrations are removed; a group being torn down removes any
    # idle registration whose Pod is gone.
    require_offline: bool = True


def matching_demand(jobs: Iterable[ActionJob], offered: frozenset[str]) -> list[ActionJob]:
    """Queued jobs this group's runners can take. Status is re-checked in case a server
    ignores the filter."""
    return [job for job in jobs if job.status == "queued" and labels_fit(job.labels, offered)]


class _MatchingByAnswer:
    """:func:`matching_demand` of one observation's queue, per offered label set, kept while
    that observation lives (by identity, never by hashing thousands of jobs). A pass, the
    status and the enrolment ask the same question of the same answer several times, and
    passes triggered by Pod events ask it again until the next poll: the walk over the jobs
    a group lists is done once per answer, not once per asking."""

    def __init__(self) -> None:
        self._memo: dict[
            int,
            tuple[weakref.ref[Observation], dict[frozenset[str], tuple[ActionJob, ...]]],
        ] = {}

    def __call__(self, observation: Observation, offered: frozenset[str]) -> tuple[ActionJob, ...]:
        key = id(observation)
        entry = self._memo.get(key)
        if entry is None or entry[0]() is not observation:
            entry = (weakref.ref(observation, lambda ref: self._forget(key, ref)), {})
            self._memo[key] = entry
        by_offer = entry[1]
        found = by_offer.get(offered)
        if found is None:
            found = by_offer[offered] = tuple(matching_demand(observation.queued, offered))
        return found

    def _forget(self, key: int, ref: weakref.ref[Observation]) -> None:
        entry = self._memo.get(key)
        if entry is not None and entry[0] is ref:
            del self._memo[key]

    def __len__(self) -> int:
        return len(self._memo)


queued_matching = _MatchingByAnswer()


def registration_names(view: RunnerJobView) -> tuple[str, ...]:
    """Names a registration of this runner Job can have: a Gitea runner registers under
    its Pod's name; a Forgejo runner is registered (by the operator) under the Job's."""
    return (*view.pod_names, view.name)


def runner_state(view: RunnerJobView, runners_by_name: Mapping[str, ActionRunner]) -> RunnerState:
    if not view.alive:
        return RunnerState.GONE
    if view.took_job:
        # An ephemeral runner takes one job; once it has, it never covers demand again.
        return RunnerState.BUSY
    registered = [runners_by_name[p] for p in registration_names(view) if p in runners_by_name]
    if any(r.busy for r in registered):
        return RunnerState.BUSY
    if registered:
        return RunnerState.IDLE
    return RunnerState.STARTING


def desired_new_runners(*, demand: int, alive: int, not_busy: int, max_active: int) -> int:
    """The capacity rule, kept alone so it can be read and tested on its own."""
    return max(0, min(demand - not_busy, max_active - alive))


@dataclass(frozen=True, slots=True)
class Plan:
    create: int
    reap: tuple[ReapCandidate, ...] = ()
    orphans: tuple[Orphan, ...] = ()
    mark_took_job: tuple[str, ...] = ()
    demand: int = 0
    alive: int = 0
    not_busy: int = 0
    states: Mapping[str, RunnerState] = field(default_factory=dict)
    # Why runner Pods cannot start, in the Pods' own words (one line per stuck Job).
    start_failures: tuple[str, ...] = ()

    def count(self, state: RunnerState) -> int:
        return sum(1 for s in self.states.values() if s is state)


def start_failure(view: RunnerJobView, now: float) -> str | None:
    """Why this starting runner's Pod cannot start, if the cluster says so."""
    if view.suspended:
        return None  # no Pod on purpose (Forgejo: waiting for its credentials)
    if view.pod_problem:
        return view.pod_problem
    if (
        view.unschedulable_since is not None
        and now - view.unschedulable_since > UNSCHEDULABLE_GRACE
    ):
        return f"Job {view.name}: its Pod is unschedulable"
    if view.sandbox_missing_since is not None and now - view.sandbox_missing_since > SANDBOX_GRACE:
        return (
            f"Job {view.name}: its node has not made its Pod's sandbox in {SANDBOX_GRACE:.0f} s "
            "(the Pod's FailedCreatePodSandBox Events say why; a runtime without user "
            "namespaces refuses dind-userns Pods so: use nodes with containerd >= 2.0 and "
            "runc >= 1.2, or choose mode dind or dind-rootless explicitly)"
        )
    if not view.all_pod_names and now - view.created_at > NO_POD_GRACE:
        return (
            f"Job {view.name}: no Pod was created (refused by quota or admission? "
            f"see kubectl describe job {view.name})"
        )
    return None


def plan(
    *,
    group_name: str,
    group_uid: str,
    jobs: Sequence[RunnerJobView],
    observation: Observation,
    offered: frozenset[str],
    max_active: int,
    idle_timeout: float,
    startup_timeout: float,
    now: float,
    pending_creations: int = 0,
    creation_blocked: bool = False,
    assigned: Sequence[ActionJob] | None = None,
    min_idle: int = 0,
    warm_max_age: float = 3600.0,
    unsettled: int = 0,
) -> Plan:
    """Decide one reconcile pass.

    ``pending_creations`` counts Jobs this process created (or is creating) that the informer
    has not shown yet; they hold a slot and cover demand exactly like a starting runner.
    ``creation_blocked`` holds creation back while the group backs off after runners that
    could not start or did not take the jobs they were made for. ``assigned``, when several
    groups could serve the same jobs, is this group's share of them (see accounting.py);
    otherwise demand is every matching queued job the group's observation lists.
    ``min_idle`` runners are kept warm beyond demand (within the maximum): they are not
    reaped for idling, only recycled once older than ``warm_max_age``. ``unsettled``
    runners finished after the observation was asked for and may have taken a job it lists
    as queued (see churn.py): they hold no slot but still cover one unit of demand each.
    """
    runners_by_name = {r.name: r for r in observation.runners}
    states = {view.name: runner_state(view, runners_by_name) for view in jobs}

    alive_views = [v for v in jobs if states[v.name] is not RunnerState.GONE]
    alive = slots_held(jobs, pending_creations)
    not_busy = pending_creations + sum(
        1 for v in alive_views if states[v.name] in (RunnerState.STARTING, RunnerState.IDLE)
    )
    demand = len(
        queued_matching(observation, offered)
        if assigned is None
        else matching_demand(assigned, offered)
    )

    reap: list[ReapCandidate] = []
    orphans: list[Orphan] = []
    warm = _warm_pool(alive_views, states, min_idle)
    if observation.runners_complete:
        for view in alive_views:
            if view.name in warm:
                since = view.started_at if view.started_at is not None else view.created_at
                reason = ReapReason.WARM_RECYCLED if now - since > warm_max_age else None
            else:
                reason = _reap_reason(
                    view, states[view.name], demand, idle_timeout, startup_timeout, now
                )
            if reason is not None:
                ids = tuple(
                    runners_by_name[p].id for p in registration_names(view) if p in runners_by_name
                )
                reap.append(ReapCandidate(view.name, reason, view.pod_names, ids))
        orphans = find_orphans(group_name, group_uid, jobs, observation.runners)

    create = 0
    if not creation_blocked:
        # Reaped runners free their slots only once deleted; the next pass sees that.
        create = desired_new_runners(
            demand=demand + min_idle,
            alive=alive,
            not_busy=not_busy + max(0, unsettled),
            max_active=max_active,
        )
    mark = tuple(
        v.name for v in alive_views if states[v.name] is RunnerState.BUSY and not v.took_job
    )
    failures = tuple(
        msg
        for v in alive_views
        if states[v.name] is RunnerState.STARTING and (msg := start_failure(v, now)) is not None
    )
    return Plan(
        create=create,
        reap=tuple(reap),
        orphans=tuple(orphans),
        mark_took_job=mark,
        demand=demand,
        alive=alive,
        not_busy=not_busy,
        states=states,
        start_failures=failures,
    )


def _warm_pool(
    views: Sequence[RunnerJobView], states: Mapping[str, RunnerState], min_idle: int
) -> set[str]:
    """The idle runners kept warm: the ``min_idle`` youngest, so the oldest get recycled."""
    if min_idle <= 0:
        return set()
    idle = [v for v in views if states[v.name] is RunnerState.IDLE]
    idle.sort(key=lambda v: v.started_at if v.started_at is not None else v.created_at)
    return {v.name for v in idle[-min_idle:]}


def _reap_reason(
    view: RunnerJobView,
    state: RunnerState,
    demand: int,
    idle_timeout: float,
    startup_timeout: float,
    now: float,
) -> ReapReason | None:
    if state is RunnerState.STARTING:
        return ReapReason.STARTUP_TIMEOUT if now - view.created_at > startup_timeout else None
    if state is RunnerState.IDLE:
        # Idle time counts from when the runner container started, not from the Job's
        # creation: a Pod that waited 9 minutes for a node still gets its full idleTimeout.
        since = view.started_at if view.started_at is not None else view.created_at
        if now - since > idle_timeout:
            return ReapReason.IDLE_WITH_DEMAND if demand > 0 else ReapReason.IDLE
    return None


def group_registrations(
    group_name: str, group_uid: str, runners: Iterable[ActionRunner]
) -> list[ActionRunner]:
    """Ephemeral registrations provably of this group: named by its UID-hashed pattern."""
    pattern, jobs = runner_pattern(group_name, group_uid), job_name_pattern(group_name, group_uid)
    return [r for r in runners if r.ephemeral and (pattern.match(r.name) or jobs.match(r.name))]


def find_orphans(
    group_name: str,
    group_uid: str,
    jobs: Sequence[RunnerJobView],
    runners: Iterable[ActionRunner],
    *,
    require_offline: bool = True,
) -> list[Orphan]:
    """Idle registrations of the group (offline ones, unless ``require_offline`` is False)
    whose Pod no longer exists at all: a runner that died before taking a job leaves one
    behind, and Gitea never removes it."""
    pods = {p for v in jobs for p in (*v.all_pod_names, *v.pod_names)}
    pods |= {v.name for v in jobs if v.alive}  # a Forgejo registration of a Job still running
    return [
        Orphan(r.id, r.name, require_offline)
        for r in group_registrations(group_name, group_uid, runners)
        if (not r.online or not require_offline) and not r.busy and r.name not in pods
    ]


@dataclass(frozen=True, slots=True)
class Teardown:
    """One pass of a deleting group's ordered teardown."""

    reap: tuple[ReapCandidate, ...]  # starting and idle runners: at once
    force_delete: tuple[str, ...]  # busy runners still alive after the drain timeout
    orphans: tuple[Orphan, ...]  # registrations whose Pods are gone
    busy: int  # busy runners still draining
    registrations: int  # registrations of the group Gitea still lists
    done: bool  # nothing of the group is left: release the finalizer


def teardown(
    *,
    group_name: str,
    group_uid: str,
    jobs: Sequence[RunnerJobView],
    observation: Observation | None,
    drained: bool,
) -> Teardown:
    """Deleting a group: stop creating; delete starting and idle runners now; let busy ones
    finish until ``drained`` (the drain timeout passed), then delete them too; remove every
    registration of the group whose Pod is gone. Without an observation (Gitea unreachable,
    credentials gone) only the cluster side can be cleaned."""
    runners = observation.runners if observation is not None else ()
    by_name = {r.name: r for r in runners}
    alive = [v for v in jobs if v.alive]
    states = {v.name: runner_state(v, by_name) for v in alive}
    reap = tuple(
        ReapCandidate(
            v.name,
            ReapReason.GROUP_DELETED,
            v.pod_names,
            tuple(by_name[p].id for p in registration_names(v) if p in by_name),
        )
        for v in alive
        if states[v.name] is not RunnerState.BUSY
    )
    busy = [v.name for v in alive if states[v.name] is RunnerState.BUSY]
    force = tuple(busy) if drained else ()
    registrations = group_registrations(group_name, group_uid, runners)
    orphans = tuple(find_orphans(group_name, group_uid, jobs, runners, require_offline=False))
    done = not alive and (observation is not None and not registrations)
    return Teardown(reap, force, orphans, len(busy), len(registrations), done)
