"""Was a runner lost, and should the job it held be re-run? Pure decisions over plain data.

A runner is *lost* when its Pod stopped for a reason that is not its runner's own exit
(objects/disruption.py) while its runner held a job: known from the runner Job's ``took-job``
annotation (the operator saw it busy), or from Gitea's runner list saying its registration
is busy now. A Pod that is merely deleted counts only in the first case, because the
operator deletes idle runners itself; a Pod evicted, pre-empted, OOM-killed or killed by a
signal also counts while its runner is registered (it may have taken a job since the last
poll; the follow-up in Gitea finds out).

The job is re-run only when Gitea has ended it as ``failure`` or ``cancelled`` (a job that
succeeded after all needs nothing), at most ``limit`` times per job line: a job, its re-run,
the re-run's re-run... share ``(repository, run, job name)``. A job that failed by itself
never gets here, since its runner exits normally.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gitea_runner_operator.api.gitea import ActionRunner
from gitea_runner_operator.api.loss import (
    LOSS_RECORD_TTL,
    MAX_LOSS_RECORDS,
    OPEN_LOSS_TTL,
    LossRecord,
    LossState,
)
from gitea_runner_operator.objects.disruption import DELETED, loss_cause
from gitea_runner_operator.objects.views import RunnerJobView

RERUN_CONCLUSIONS = frozenset({"failure", "cancelled"})


@dataclass(frozen=True, slots=True)
class LostRunner:
    job_name: str  # the runner Job
    pod: str  # the lost Pod (= the runner's registered name)
    cause: str


def find_losses(
    views: Sequence[RunnerJobView],
    pods: Mapping[str, Sequence[Mapping[str, Any]]],
    recorded: Iterable[str],
    runners: Iterable[ActionRunner],
) -> list[LostRunner]:
    """Runner Jobs with a newly lost runner (at most one loss per runner Job: the Job is
    deleted once its loss is followed up). ``pods`` maps a runner Job to its Pods as the
    cache has them, including those deleted recently."""
    done = set(recorded)
    by_name = {r.name: r for r in runners}
    out: list[LostRunner] = []
    for view in views:
        if view.name in done or (view.deleting and not view.took_job):
            # A runner Job being deleted (reaped, or its TTL) stops its Pods on purpose.
            continue
        for pod in sorted(pods.get(view.name, ()), key=lambda p: p["metadata"]["name"]):
            name = pod["metadata"]["name"]
            cause = loss_cause(pod)
            if cause is None:
                continue
            registration = by_name.get(name)
            held = view.took_job or (registration is not None and registration.busy)
            if held or (cause != DELETED and registration is not None):
                out.append(LostRunner(view.name, name, cause))
                break
    return out


def line_of(record: LossRecord) -> tuple[str, int, str]:
    return (record.repo, record.run_id, record.job_name)


def prior_reruns(records: Mapping[str, LossRecord], record: LossRecord) -> int:
    """Re-runs for a loss already done (or begun) in this record's job line."""
    line = line_of(record)
    return max(
        (r.reruns for r in records.values() if r is not record and line_of(r) == line),
        default=0,
    )


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do with a held job now: ``None`` state means wait and look again later."""

    state: LossState | None
    why: str = ""


def decide(
    *,
    job_done: bool,
    conclusion: str,
    job_attempt: int,
    run_done: bool,
    run_attempt: int,
    prior: int,
    limit: int,
) -> Verdict:
    if not job_done:
        return Verdict(None, "Gitea still counts the job running")
    if conclusion not in RERUN_CONCLUSIONS:
        return Verdict(LossState.NOT_NEEDED, f"the job ended {conclusion or 'without a result'}")
    if limit <= 0:
        return Verdict(LossState.DISABLED, "spec.retry.onRunnerLoss is 0")
    if prior >= limit:
        return Verdict(LossState.LIMIT, f"re-run {prior} time(s) after runner losses already")
    if not run_done:
        return Verdict(None, "Gitea re-runs only a finished run")
    if job_attempt and run_attempt > job_attempt:
        return Verdict(LossState.NOT_NEEDED, "the run was re-run already")
    return Verdict(LossState.RERUN)


def expired(records: Mapping[str, LossRecord], now: float) -> list[str]:
    """Records to drop: settled ones older than a day, open ones older than
    ``OPEN_LOSS_TTL`` (their follow-up will not end), and the oldest settled ones beyond the
    cap (open ones are kept: they are still being followed up)."""
    old = {k for k, r in records.items() if _stale(r, now)}
    return sorted(old | set(_oldest_settled(records, old, len(records) - MAX_LOSS_RECORDS)))


def make_room(records: Mapping[str, LossRecord], new: int, now: float) -> tuple[int, list[str]]:
    """How many of ``new`` losses may be recorded now, and which records to drop for them:
    stale ones, then the oldest settled ones, so that the group keeps at most
    ``MAX_LOSS_RECORDS``. Only open records still being followed up take room from a new
    loss; settled and stale ones never stop one being recorded."""
    stale = {k for k, r in records.items() if _stale(r, now)}
    following = sum(1 for k, r in records.items() if not r.state.final and k not in stale)
    room = min(new, max(0, MAX_LOSS_RECORDS - following))
    excess = len(records) - len(stale) + room - MAX_LOSS_RECORDS
    return room, sorted(stale | set(_oldest_settled(records, stale, excess)))


def _stale(record: LossRecord, now: float) -> bool:
    if record.state.final:
        return now - (record.settled_at or record.at) > LOSS_RECORD_TTL
    return now - record.at > OPEN_LOSS_TTL


def _oldest_settled(records: Mapping[str, LossRecord], skip: set[str], count: int) -> list[str]:
    settled = sorted(
        (k for k, r in records.items() if r.state.final and k not in skip),
        key=lambda k: (records[k].settled_at or records[k].at, k),
    )
    return settled[: max(0, count)]
