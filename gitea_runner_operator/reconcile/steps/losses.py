"""The losses step: note, for the group's status, each runner newly lost while it held a job
(:mod:`.loss` decides); the pass writes the notes with the status, and the group's poll task
does the rest in Gitea."""

from __future__ import annotations

import structlog

from gitea_runner_operator.api.loss import LossRecord, loss_records
from gitea_runner_operator.reconcile.inputs import GroupPass
from gitea_runner_operator.reconcile.loss import find_losses, make_room
from gitea_runner_operator.reconcile.status.parts import PendingLosses

log = structlog.get_logger(__name__)


def record_losses(book: PendingLosses, p: GroupPass, now: float) -> None:
    """Note the losses found. At most
    ``MAX_LOSS_RECORDS`` are kept: a flood of losses is logged, never written without bound
    (an object grown too large would fail every write, creates included). Settled and
    stale records make room for a new loss (:func:`.loss.make_room`). The records noted and
    not yet written count as written: a loss is never recorded twice."""
    assert p.observation is not None
    records = loss_records(book.view(p.key, p.group))
    lost = find_losses(p.views, p.all_pods, records, p.observation.runners)
    room, drop = make_room(records, len(lost), now) if lost else (0, [])
    if len(lost) > room:
        log.warning(
            "runner losses not recorded: too many open",
            group=p.key,
            lost=len(lost),
            recorded=room,
            jobs=[loss.job_name for loss in lost[room:]][:10],
        )
    lost = lost[:room]
    if not lost:
        return
    book.note(
        p.key,
        {
            **dict.fromkeys(drop),
            **{
                loss.job_name: LossRecord(pod=loss.pod, cause=loss.cause, at=now).encode()
                for loss in lost
            },
        },
    )
    for loss in lost:
        log.warning("runner lost", group=p.key, job=loss.job_name, pod=loss.pod, cause=loss.cause)
