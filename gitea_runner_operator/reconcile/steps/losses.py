"""The losses step: write down, in the group's status, each runner newly lost while it held
a job (:mod:`.loss` decides); the group's poll task does the rest in Gitea."""

from __future__ import annotations

import structlog

from gitea_runner_operator.api.loss import (
    LossRecord,
    loss_records,
    losses_patch,
)
from gitea_runner_operator.reconcile.inputs import GroupPass
from gitea_runner_operator.reconcile.loss import find_losses, make_room
from gitea_runner_operator.reconcile.ports import ClusterWrites

log = structlog.get_logger(__name__)


async def record_losses(cluster: ClusterWrites, p: GroupPass, now: float) -> bool:
    """True when a loss was recorded (the poll task should follow it up). At most
    ``MAX_LOSS_RECORDS`` are kept: a flood of losses is logged, never written without bound
    (an object grown too large would fail every write, creates included). Settled and
    stale records make room for a new loss (:func:`.loss.make_room`)."""
    assert p.observation is not None
    records = loss_records(p.group)
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
        return False
    await cluster.patch_group_status(
        p.namespace,
        p.name,
        losses_patch(
            {
                **dict.fromkeys(drop),
                **{
                    loss.job_name: LossRecord(pod=loss.pod, cause=loss.cause, at=now).encode()
                    for loss in lost
                },
            }
        ),
    )
    for loss in lost:
        log.warning("runner lost", group=p.key, job=loss.job_name, pod=loss.pod, cause=loss.cause)
    return True
