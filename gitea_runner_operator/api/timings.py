"""Job start-up latency and execution time from Gitea's own timestamps.

Why Gitea's clock: the operator sees a job only at poll time, so its own clock would add up
to a poll interval of noise. Gitea stamps ``created_at`` when the job is queued,
``started_at`` when a runner takes it, and ``completed_at`` when it ends; a time that has
not happened yet is the zero time (1970-01-01), which must never become a latency.
"""

from __future__ import annotations

from datetime import UTC, datetime

from gitea_runner_operator.api.gitea import ActionJob

_UNSET_BEFORE = datetime(1971, 1, 1, tzinfo=UTC)


def _real(ts: datetime | None) -> datetime | None:
    if ts is None:
        return None
    ts = ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)
    return ts if ts >= _UNSET_BEFORE else None


def startup_latency(job: ActionJob) -> float | None:
    """Seconds from queued to taken by a runner; None until a runner has taken it."""
    created, started = _real(job.created_at), _real(job.started_at)
    if created is None or started is None or not job.runner_id:
        return None
    return max(0.0, (started - created).total_seconds())


def execution_time(job: ActionJob) -> float | None:
    """Seconds from taken to finished; None until it has finished."""
    started, completed = _real(job.started_at), _real(job.completed_at)
    if started is None or completed is None:
        return None
    return max(0.0, (completed - started).total_seconds())
