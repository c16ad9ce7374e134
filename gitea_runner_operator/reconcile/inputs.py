"""One reconcile pass's inputs, read once: the group, its runner Jobs and Pods, the Jobs being
created, and (once the spec parsed and the poll task answered) the Gitea snapshot, the runners
that finished since it was asked for, and each runner's state. Pure.

Every step of the pass (claims, create, teardown, losses, report) reads this one value instead
of asking the cache again, so they all see the same runners and count them the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gitea_runner_operator.api.naming import job_name_pattern
from gitea_runner_operator.api.observation import Observation, Snapshot
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.objects.views import RunnerJobView, job_view, pods_by_job, slots_held
from gitea_runner_operator.reconcile.churn import PEER_ANSWER_WINDOW, unsettled_names
from gitea_runner_operator.reconcile.expectations import Expectations
from gitea_runner_operator.reconcile.ports import ClusterReads
from gitea_runner_operator.reconcile.scaling import RunnerState, runner_state


@dataclass(frozen=True, slots=True)
class GroupPass:
    """What one pass knows of its group. ``pending``: Jobs expected (created, or being
    created) that the cache does not show yet; they hold a slot like a starting runner."""

    key: str
    group: dict[str, Any]
    views: Sequence[RunnerJobView]
    jobs: Sequence[Mapping[str, Any]]
    # Pods by Job, the deleted ones included (a lost runner's Pod is often gone already).
    all_pods: Mapping[str, list[Mapping[str, Any]]]
    pending: int
    spec: RunnerGroupSpec | None = None
    snapshot: Snapshot | None = None
    # Runners that finished after the snapshot was asked for (churn.py).
    released: int = 0
    states: Mapping[str, RunnerState] = field(default_factory=dict)
    # When runners finished that ``released`` does not count (before the answer was asked,
    # or seen busy by it): each may have taken a job a peer's older answer lists (churn.py).
    finished_at: tuple[float, ...] = ()

    @property
    def meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = self.group["metadata"]
        return meta

    @property
    def namespace(self) -> str:
        return str(self.meta["namespace"])

    @property
    def name(self) -> str:
        return str(self.meta["name"])

    @property
    def uid(self) -> str:
        return str(self.meta["uid"])

    @property
    def present(self) -> set[str]:
        return {v.name for v in self.views}

    @property
    def observation(self) -> Observation | None:
        return self.snapshot.observation if self.snapshot is not None else None

    @property
    def alive(self) -> int:
        """Runner Jobs holding a slot: the live ones and those being created."""
        return slots_held(self.views, self.pending)

    def created(self, count: int) -> GroupPass:
        """The pass after ``count`` Jobs were created: they are expected, not yet cached."""
        return dataclasses.replace(self, pending=self.pending + count) if count else self


def read_pass(cache: ClusterReads, expectations: Expectations, key: str) -> GroupPass | None:
    """Read the group's objects from the cache, once. None: the group is gone."""
    group = cache.group(key)
    if group is None:
        return None
    live = cache.runner_pods(key)
    pods = pods_by_job(live)
    all_pods = pods_by_job([*live, *cache.deleted_pods(key)])
    jobs = cache.runner_jobs(key)
    labelled = [job_view(job, pods.get(job["metadata"]["name"], [])) for job in jobs]
    # Only Jobs named as this group names its runners are its runners: a Forgejo runner
    # registers under its Job's name, so a tenant's Job named like another team's runner
    # would otherwise make that registration this group's to disable and delete.
    meta = group.get("metadata") or {}
    own = job_name_pattern(str(meta.get("name", "")), str(meta.get("uid", "")))
    views = [v for v in labelled if own.match(v.name)]
    return GroupPass(
        key=key,
        group=group,
        views=views,
        jobs=jobs,
        all_pods=all_pods,
        pending=expectations.pending(key, {v.name for v in views}),
    )


def with_answer(
    cache: ClusterReads, p: GroupPass, spec: RunnerGroupSpec, snapshot: Snapshot | None
) -> GroupPass:
    """Add the poll task's latest answer: the runners' states by it, the runners that
    finished after it was asked for and may have taken a job it still lists as queued, and
    when the rest finished (a peer's older answer may list the job one of them took)."""
    observation = snapshot.observation if snapshot is not None else None
    released = 0
    finished_at: tuple[float, ...] = ()
    if snapshot is not None and observation is not None:
        since = snapshot.started_at
        finished = cache.released_since(p.key, since - PEER_ANSWER_WINDOW)
        counted = unsettled_names([f for f in finished if f.at >= since], observation.runners)
        released = len(counted)
        finished_at = tuple(sorted(f.at for f in finished if f.job_name not in counted))
    by_name = {r.name: r for r in observation.runners} if observation else {}
    states = {v.name: runner_state(v, by_name) for v in p.views}
    return dataclasses.replace(
        p, spec=spec, snapshot=snapshot, released=released, states=states, finished_at=finished_at
    )
