"""Follows up lost runners in Gitea, in the group's poll task (the only place that talks to
that group's Gitea): which job the lost runner held, removing what is left of the runner,
and re-running the job once Gitea has failed it.

Each step reads the loss record (the RunnerGroup's ``status.losses``, see api/loss.py, with
the records noted and not yet written: reconcile/status/parts.py) and notes the next state for the
group's next pass to write, which it queues; it writes no status itself. So a restart, a
second replica taking over, or a Gitea that fails half-way resumes the same record and never
re-runs one loss twice. The one window left: Gitea accepted the re-run and the operator died
before the pass wrote that down. The record then still says ``held``; the run's attempt
number has moved past the lost job's, which reads as "re-run already" and settles it without
a second re-run (only that re-run's count in the job line is lost). What destroys the evidence
of a loss (the runner's registration and its Job) waits until the cluster shows the job the
runner held: a restart before then finds the loss again.

Gitea 1.27 keeps a lost runner's task ``running`` until its zombie-task cron
(``[cron.stop_zombie_tasks]``, every 5 minutes by default) finds it without an update for
``[actions] ZOMBIE_TASK_TIMEOUT`` (10 minutes by default) and fails it. Deleting the runner's
registration does not end the task sooner (the task row keeps the runner's id; only the
runner row is soft-deleted), but it stops a restarted container from coming back under the
old registration, and it is the clean-up that would otherwise wait for the runner's Job.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import structlog

from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.loss import (
    LossRecord,
    LossState,
    loss_records,
    stray_keys,
)
from gitea_runner_operator.api.observation import Snapshot
from gitea_runner_operator.api.refs import is_repository
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.forge.errors import GiteaError
from gitea_runner_operator.forge.observe import GiteaHandle
from gitea_runner_operator.forge.reruns import (
    RerunRefused,
    RerunUnsupported,
    get_job,
    get_run,
    repo_of,
    rerun_job,
)
from gitea_runner_operator.kube.cache import ClusterCache
from gitea_runner_operator.metrics import Metrics
from gitea_runner_operator.objects.views import pods_by_job
from gitea_runner_operator.reconcile.loss import decide, expired, prior_reruns
from gitea_runner_operator.reconcile.ports import FollowUpWrites, LossNotes

log = structlog.get_logger(__name__)

_SIGNAL = re.compile(r"^Signal\d+$")


def reason_label(cause: str) -> str:
    """The metric's ``reason``: the cause, with signal numbers folded into one value."""
    return "Signal" if _SIGNAL.match(cause) else cause


def _matches(job: ActionJob, pod: str, runner_ids: set[int]) -> bool:
    return job.runner_name == pod or (job.runner_id != 0 and job.runner_id in runner_ids)


@dataclass(slots=True)
class LossFollowUp:
    """The follow-up of a group's lost runners, run by its poll task after each observation."""

    cluster: FollowUpWrites
    cache: ClusterCache
    notes: LossNotes  # the records for the group's next pass to write
    enqueue: Callable[[str], None]  # queues that pass
    metrics: Metrics | None = None
    wall: Callable[[], float] = time.time
    # group -> runner Jobs whose lost runner is to be retired once the cluster shows the
    # job it held (retiring destroys the evidence of the loss)
    retiring: dict[str, set[str]] = field(default_factory=dict)

    async def run(
        self, key: str, spec: RunnerGroupSpec, handle: GiteaHandle, snapshot: Snapshot
    ) -> None:
        stored = self.cache.group(key)
        if stored is None or stored["metadata"].get("deletionTimestamp"):
            return
        group = self.notes.view(key, stored)
        records = loss_records(group)
        stray = stray_keys(group, records)
        if stray:  # not this group's, garbled, or beyond the bounds: never acted on
            self._write(key, dict.fromkeys(stray))
        working: Sequence[ActionJob] | None = None
        if self.retiring.get(key):
            working = (await handle.client.list_jobs(handle.scope, "in_progress")).items
            await self._retire_shown(key, handle, stored, working)
        if not records:
            return
        for job_name, record in sorted(records.items()):
            if record.state.final:
                continue
            new: LossRecord | None
            try:
                if record.state is LossState.LOST:
                    if working is None:
                        working = (await handle.client.list_jobs(handle.scope, "in_progress")).items
                    new = await self._identify(handle, snapshot, record, working)
                else:
                    new = await self._follow(handle, spec, records, record)
            except GiteaError as exc:
                log.warning(
                    "lost runner follow-up postponed", group=key, job=job_name, error=str(exc)
                )
                continue
            if new is None or new == record:
                continue
            self._write(key, {job_name: new.encode()})
            records[job_name] = new
            await self._report(key, group, job_name, record, new)
            if record.state is LossState.LOST and new.state is LossState.HELD:
                self.retiring.setdefault(key, set()).add(job_name)
        drop = expired(records, self.wall())
        if drop:
            self._write(key, dict.fromkeys(drop))

    def _write(self, key: str, records: dict[str, str | None]) -> None:
        """Note the records for the group's next pass, and queue that pass."""
        self.notes.note(key, records)
        self.enqueue(key)

    async def _retire_shown(
        self,
        key: str,
        handle: GiteaHandle,
        stored: dict[str, Any],
        working: Sequence[ActionJob],
    ) -> None:
        """Retire the lost runners whose held job the cluster shows by now."""
        shown = loss_records(stored)
        noted = loss_records(self.notes.view(key, stored))
        due = self.retiring[key]
        for job_name in sorted(due):
            record = shown.get(job_name)
            if job_name not in noted:
                due.discard(job_name)  # the record was dropped: nothing to retire by
            elif record is not None and record.state is not LossState.LOST:
                due.discard(job_name)
                await self._retire(key, handle, stored, job_name, record, working)
            # else not written yet: the next follow-up looks again
        if not due:
            del self.retiring[key]

    async def _identify(
        self,
        handle: GiteaHandle,
        snapshot: Snapshot,
        record: LossRecord,
        working: Sequence[ActionJob],
    ) -> LossRecord:
        """Which job the lost runner held: Gitea's jobs in progress name their runner from
        the moment a task is handed out until Gitea ends it; if Gitea ended it already, the
        newest finished jobs still name the runner's id."""
        runners = snapshot.observation.runners if snapshot.observation else ()
        ids = {r.id for r in runners if r.name == record.pod}
        held = next((j for j in working if _matches(j, record.pod, ids)), None)
        if held is None:
            done = await handle.client.list_jobs(
                handle.scope, "completed", max_pages=1, newest_first=True
            )
            held = next((j for j in done.items if _matches(j, record.pod, ids)), None)
        if held is None:
            return record.settle(LossState.NO_JOB, self.wall())
        return replace(
            record,
            state=LossState.HELD,
            repo=repo_of(held.url),
            run_id=held.run_id,
            job_id=held.id,
            job_name=held.name,
            runner_id=held.runner_id or min(ids, default=0),
        )

    async def _retire(
        self,
        key: str,
        handle: GiteaHandle,
        group: dict[str, Any],
        job_name: str,
        record: LossRecord,
        working: Sequence[ActionJob],
    ) -> None:
        """The lost runner is gone for good: remove its registration, and its runner Job
        unless another Pod of that Job (the Job controller's replacement) runs a job now."""
        if record.runner_id:
            await handle.client.delete_runner(handle.scope, record.runner_id)
        names = {j.runner_name for j in working}
        pods = pods_by_job(self.cache.runner_pods(key)).get(job_name, [])
        others = [p["metadata"]["name"] for p in pods if p["metadata"]["name"] != record.pod]
        if not any(name in names for name in others):
            await self.cluster.delete_job(group["metadata"]["namespace"], job_name)

    async def _follow(
        self,
        handle: GiteaHandle,
        spec: RunnerGroupSpec,
        records: dict[str, LossRecord],
        record: LossRecord,
    ) -> LossRecord | None:
        now = self.wall()
        if not is_repository(record.repo):
            return record.settle(LossState.NO_JOB, now)
        job = await get_job(handle.client, record.repo, record.job_id)
        if job is None:
            return record.settle(LossState.NO_JOB, now)
        run = await get_run(handle.client, record.repo, record.run_id) if job.done else None
        prior = prior_reruns(records, record)
        verdict = decide(
            job_done=job.done,
            conclusion=job.conclusion,
            job_attempt=job.run_attempt,
            run_done=run is not None and run.done,
            run_attempt=run.run_attempt if run is not None else 0,
            prior=prior,
            limit=spec.retry.on_runner_loss,
        )
        if verdict.state is None:
            return None
        if verdict.state is not LossState.RERUN:
            return record.settle(verdict.state, now)
        try:
            again = await rerun_job(handle.client, record.repo, record.run_id, record.job_id)
        except RerunUnsupported:
            return record.settle(LossState.UNSUPPORTED, now)
        except RerunRefused as exc:
            log.warning("Gitea refused a re-run", job=record.job_id, error=str(exc))
            return record.settle(LossState.REFUSED, now)
        return record.settle(LossState.RERUN, now, reruns=prior + 1, rerun_job_id=again.id)

    async def _report(
        self, key: str, group: dict[str, Any], job_name: str, old: LossRecord, new: LossRecord
    ) -> None:
        what = (
            f"job {new.job_name!r} ({new.repo} run {new.run_id}, job {new.job_id})"
            if new.job_id
            else "its job"
        )
        lost = f"its runner {new.pod} (runner Job {job_name}) was lost: {new.cause}"
        meta = group["metadata"]
        if new.state is LossState.RERUN:
            delay = new.settled_at - new.at
            log.info(
                "re-ran a job after its runner was lost",
                group=key,
                job=new.job_id,
                rerun_job=new.rerun_job_id,
                cause=new.cause,
                seconds_since_loss=round(delay, 1),
            )
            if self.metrics is not None:
                self.metrics.job_rerun(meta["namespace"], meta["name"], reason_label(new.cause))
            await self.cluster.emit_event(
                group,
                "Normal",
                "JobRerun",
                f"Re-ran {what} as job {new.rerun_job_id}: {lost} "
                f"(re-run {new.reruns} of at most {self._limit(group)})",
            )
            return
        why = {
            LossState.LIMIT: "spec.retry.onRunnerLoss re-runs of this job were done already",
            LossState.DISABLED: "spec.retry.onRunnerLoss is 0",
            LossState.UNSUPPORTED: "this Gitea has no job re-run API (needs Gitea >= 1.27)",
            LossState.REFUSED: "Gitea refused the re-run (see the operator log)",
        }.get(new.state)
        if why is not None:
            await self.cluster.emit_event(
                group, "Warning", "JobNotRerun", f"Did not re-run {what}: {lost}; {why}"
            )
        elif old.state is LossState.LOST:
            log.info("lost runner followed up", group=key, job=job_name, state=new.state.value)

    @staticmethod
    def _limit(group: dict[str, Any]) -> int:
        retry = (group.get("spec") or {}).get("retry") or {}
        value = retry.get("onRunnerLoss", 1)
        return int(value) if isinstance(value, int) else 1
