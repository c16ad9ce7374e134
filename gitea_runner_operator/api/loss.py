"""A lost runner, as the cluster remembers it: one annotation on the RunnerGroup per loss.

Why on the group and not on the runner Job: the runner Job of a lost runner is deleted at
once (its runner is gone for good) and finished ones go after ``ttlSecondsAfterFinished``,
but the count of re-runs must outlive both, or a job that keeps losing its runner would be
re-run for ever. One key per loss (``runner-loss.gitea.bpg.pw/<runner Job>``) lets the
reconcile (which records the loss) and the group's poll task (which follows it up in Gitea)
write without a read-modify-write race on a shared value, and a restart or a second replica
reads the same record and never acts on the same loss twice.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any, Self

from gitea_runner_operator.api import constants

LOSS_ANNOTATION_PREFIX = f"runner-loss.{constants.GROUP}/"
# Records of settled losses are dropped after this long, and never more than this many kept.
LOSS_RECORD_TTL = 86400.0
MAX_LOSS_RECORDS = 100


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


def loss_key(runner_job: str) -> str:
    return LOSS_ANNOTATION_PREFIX + runner_job


def loss_records(group: dict[str, Any]) -> dict[str, LossRecord]:
    """Runner Job name -> its loss record, from the group's annotations."""
    annotations = (group.get("metadata") or {}).get("annotations") or {}
    out: dict[str, LossRecord] = {}
    for key, value in annotations.items():
        if key.startswith(LOSS_ANNOTATION_PREFIX) and isinstance(value, str):
            record = LossRecord.decode(value)
            if record is not None:
                out[key[len(LOSS_ANNOTATION_PREFIX) :]] = record
    return out
