"""When a pass comes back on its own after a back-off or a stale share: the group may be
waiting with nothing else to bring it back (its poll answers unchanged, no event). Pure."""

from __future__ import annotations

from gitea_runner_operator.reconcile.capacity.ledger import MIN_INTERVAL
from gitea_runner_operator.reconcile.state import GroupState
from gitea_runner_operator.reconcile.steps.create import CREATE_BACKOFF_MAX
from gitea_runner_operator.reconcile.steps.stuck import STUCK_BACKOFF_MAX


def come_back(
    requeue: float | None, state: GroupState, now: float, *, stale_share: bool
) -> float | None:
    """``requeue``, or sooner: at the end of a back-off, or once a stale share may be
    recomputed (``stale_share``: read before its family's latest change, by a group with
    jobs it could serve), whichever comes first."""
    if now < state.blocked_until:
        requeue = min(requeue or STUCK_BACKOFF_MAX, state.blocked_until - now)
    if stale_share:
        # Look again once the family's assignment may be recomputed (ledger.MIN_INTERVAL).
        requeue = min(requeue or MIN_INTERVAL, MIN_INTERVAL)
    if state.create_error is not None and now < state.create_retry_at:
        # Try again, and claim jobs again (accounting), once the create back-off ends.
        requeue = min(requeue or CREATE_BACKOFF_MAX, state.create_retry_at - now)
    return requeue
