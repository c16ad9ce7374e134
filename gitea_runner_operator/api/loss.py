"""A lost runner, as the cluster remembers it: one entry per loss in the RunnerGroup's
``status.losses``, keyed by the runner Job.

Why on the group and not on the runner Job: the runner Job of a lost runner is deleted at
once (its runner is gone for good) and finished ones go after ``ttlSecondsAfterFinished``,
but the count of re-runs must outlive both, or a job that keeps losing its runner would be
re-run for ever. One key per loss lets the reconcile (which records the loss) and the group's
poll task (which follows it up in Gitea) write with a merge patch, without a read-modify-write
race on a shared value, and a restart or a second replica reads the same record and never
acts on the same loss twice.

Why ``status`` and not annotations: the operator acts on a record with the group's Gitea
token and its own cluster rights (it deletes a registration and a Job, it re-runs a job in
the repository the record names), and the group's users can write its annotations but not
its status subresource. As a second fence a record is read only when its key names a runner
Job of this group (api/naming.py) and its Pod is one of that Job's, and only so many records,
each so large, are read: a flood of losses never grows the object without bound.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any, Self

from gitea_runner_operator.api.naming import job_name_pattern

LOSSES = "losses"  # the field of the RunnerGroup's status
# Records of settled losses are dropped after this long, and never more than this many kept.
LOSS_RECORD_TTL = 86400.0
MAX_LOSS_RECORDS = 100
# An open record (its job never identified, or never ended in Gitea: a 403 on the job's
# repository) is dropped after this long. Gitea ends a job whose runner went silent within
# hours (its endless-task timeout is 3 h by default): past this, nothing more will come of
# it, and a hundred such records would otherwise stop loss recording for the group.
OPEN_LOSS_TTL = 6 * 3600.0
# A record the operator writes is about 300 bytes; anything longer is not one of ours.
MAX_RECORD_BYTES = 1024
# A runner's Pod: its Job's name and the Job controller's 5-character suffix.
_POD_SUFFIX = re.compile(r"^-[a-z0-9]{5}$")


class LossState(StrEnum):
    """Where the follow-up of one loss stands. Every state but ``LOST``/``HELD`` is final."""

    LOST = "lost"  # recorded from the cluster; the job it held is not known yet
    HELD = "held"  # Gitea named the job; waiting for Gitea to end it
    RERUN = "rerun"  # re-run through the API
    NOT_NEEDED = "not-needed"  # the job ended well after all (or was re-run by someone)
    NO_JOB = "no-job"  # Gitea named no job for this runner
    LIMIT = "limit"  # spec.retry.onRunnerLoss re-runs of this job done already
    DISABLED = "disabled"  # spec.retry.onRunnerLoss is 0
    UNSUPPORTED = "unsupported"  # this Gitea has no re-run endpoint (before 1.27)
    REFUSED = "refused"  # Gitea refused the re-run (e.g. its MAX_RERUN_ATTEMPTS)

    @property
    def final(self) -> bool:
        return self not in (LossState.LOST, LossState.HELD)


@dataclass(frozen=True, slots=True)
class LossRecord:
    """One runner lost while it held (or may have held) a job."""

    pod: str  # the lost Pod, which is also the runner's registered name
    cause: str  # e.g. EvictionByEvictionAPI, OOMKilled, Signal9, Deleted
    at: float  # wall clock of the detection
    state: LossState = LossState.LOST
    repo: str = ""  # owner/name of the job's repository
    run_id: int = 0
    job_id: int = 0
    job_name: str = ""
    runner_id: int = 0
    # How many times this job's line (the original and its re-runs) was re-run for a loss,
    # including this record's own re-run, and the job id Gitea gave that re-run.
    reruns: int = 0
    rerun_job_id: int = 0
    settled_at: float = 0.0

    def encode(self) -> str:
        return json.dumps(
            {k: v for k, v in asdict(self).items() if v not in (0, 0.0, "")},
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def decode(cls, raw: str) -> Self | None:
        """None for a value that is not a record of ours (hand-edited, truncated)."""
        try:
            data: Any = json.loads(raw)
            return cls(
                pod=str(data["pod"]),
                cause=str(data["cause"]),
                at=float(data["at"]),
                state=LossState(data.get("state", LossState.LOST)),
                repo=str(data.get("repo", "")),
                run_id=int(data.get("run_id", 0)),
                job_id=int(data.get("job_id", 0)),
                job_name=str(data.get("job_name", "")),
                runner_id=int(data.get("runner_id", 0)),
                reruns=int(data.get("reruns", 0)),
                rerun_job_id=int(data.get("rerun_job_id", 0)),
                settled_at=float(data.get("settled_at", 0.0)),
            )
        except (ValueError, TypeError, KeyError):
            return None

    def settle(self, state: LossState, now: float, **changes: Any) -> LossRecord:
        return replace(self, state=state, settled_at=now, **changes)


def loss_records(group: dict[str, Any]) -> dict[str, LossRecord]:
    """Runner Job name -> its loss record, from the group's status: only records that name
    one of this group's runner Jobs and a Pod of that Job, at most ``MAX_LOSS_RECORDS`` of
    them (open ones first, then the newest)."""
    stored = _stored(group)
    if not stored:
        return {}  # every quiet poll of every group: no pattern to compile (re's cache is
        # smaller than 1,000 groups' patterns, so each would be compiled anew)
    meta = group.get("metadata") or {}
    ours = job_name_pattern(str(meta.get("name") or ""), str(meta.get("uid") or ""))
    out: dict[str, LossRecord] = {}
    for job, value in stored.items():
        if not isinstance(value, str) or len(value) > MAX_RECORD_BYTES or not ours.match(job):
            continue
        record = LossRecord.decode(value)
        if record is not None and _of_job(record.pod, job):
            out[job] = record
    if len(out) > MAX_LOSS_RECORDS:
        kept = sorted(out, key=lambda j: (out[j].state.final, -out[j].at, j))
        out = {j: out[j] for j in kept[:MAX_LOSS_RECORDS]}
    return out


def _of_job(pod: str, job: str) -> bool:
    """The Pod is that runner Job's (or, on Forgejo, the registration carries the Job's
    name): its registration is then provably the group's own."""
    return pod == job or (pod.startswith(job) and _POD_SUFFIX.match(pod[len(job) :]) is not None)


def stray_keys(group: dict[str, Any], records: Mapping[str, LossRecord]) -> list[str]:
    """Stored keys that are not among ``records`` (not this group's, garbled, or beyond the
    bounds): the follow-up removes them."""
    return sorted(k for k in _stored(group) if k not in records)


def _stored(group: dict[str, Any]) -> dict[str, Any]:
    stored = (group.get("status") or {}).get(LOSSES)
    return stored if isinstance(stored, dict) else {}
