"""How often a group's safety-net poll asks Gitea, from what is known of its webhook deliveries.

Polling is the source of truth; a delivery only wakes the group sooner. So while a group's
deliveries are known to arrive, its poll may stretch (``spec.webhook.pollInterval``, bounded
by the platform's ``--max-webhook-poll-interval``): a job whose delivery is lost then waits
at most one stretched interval, and is never counted twice or forgotten. Any sign that a
delivery may have been missed shrinks the poll back to ``spec.pollInterval`` at once:

- the group has no webhook of its own: it polls as it always did;
- it has runner Jobs alive: their registrations, idle times and reaps follow the poll;
- its managed hook is not reported healthy by Gitea (failing, or not confirmed yet);
- no verified delivery since this process started polling the group, or since this replica
  took it over (a restart or a hand-over starts with no evidence);
- a poll found a queued job of the group that no delivery announced, and no delivery came
  since;
- no delivery for longer than :data:`DELIVERY_WINDOW` (a long silence proves nothing), to
  the group or, once the group has had one of its own, to any group of the same Gitea that
  this replica polls: a quiet repository hears nothing for days, but its hook is Gitea's
  like the others', and deliveries from that Gitea arriving say the way in still works.

A pure function over plain data (:func:`decide`), so the poll task only records the evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

# How long one verified delivery vouches for a group's hook: past it, a quiet group polls
# at ``spec.pollInterval`` again until the next delivery.
DELIVERY_WINDOW: Final = 3600.0


class CadenceReason(StrEnum):
    """Why a group polls at the interval in force: ``status.poll.reason`` and the label of
    the series by reason (a fixed set: docs/decisions/0004-bounded-metric-labels.md)."""

    NO_WEBHOOK = "NoWebhook"
    RUNNERS_ACTIVE = "RunnersActive"
    DELIVERING = "DeliveriesArrive"
    HOOK_NOT_HEALTHY = "HookNotHealthy"
    STARTED = "NoDeliverySinceStart"
    HANDED_OVER = "NoDeliverySinceHandOver"
    MISSED = "MissedDelivery"
    GAP = "DeliveryGap"

    @property
    def stretched(self) -> bool:
        return self is CadenceReason.DELIVERING


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the group's poll task knows of its deliveries (monotonic times)."""

    origin: CadenceReason = CadenceReason.STARTED  # STARTED or HANDED_OVER
    last_delivery: float | None = None  # the latest verified delivery for the group
    last_miss: float | None = None  # the latest poll that found an unannounced queued job


@dataclass(frozen=True, slots=True)
class Cadence:
    """The interval in force (seconds) and why; a stretched one holds until ``expires``
    (the end of the delivery window), which :meth:`delay` does not sleep past."""

    interval: float
    reason: CadenceReason
    expires: float | None = field(default=None, compare=False)

    def delay(self, now: float, base: float) -> float:
        """Seconds until the next poll: the interval, cut at the end of the window (a gap is
        noticed when it starts, not one stretched interval later), never below ``base``."""
        if self.expires is None:
            return self.interval
        return max(base, min(self.interval, self.expires - now))

    def message(self, base: float) -> str:
        """One sentence for the status, saying what brings it back or stretches it."""
        text = _MESSAGES[self.reason]
        return text.format(interval=interval_text(self.interval), base=interval_text(base))


_MESSAGES: Final = {
    CadenceReason.NO_WEBHOOK: "no webhook of its own: polls every {interval}",
    CadenceReason.RUNNERS_ACTIVE: "runner Jobs are alive: polls every {interval}",
    CadenceReason.DELIVERING: (
        "webhook deliveries arrive: the safety-net poll runs every {interval}; "
        "a missed delivery brings it back to {base}"
    ),
    CadenceReason.HOOK_NOT_HEALTHY: (
        "the managed hook is not reported healthy by Gitea: polls every {interval}"
    ),
    CadenceReason.STARTED: "no delivery since the operator started: polls every {interval}",
    CadenceReason.HANDED_OVER: (
        "no delivery since this replica took the group over: polls every {interval}"
    ),
    CadenceReason.MISSED: (
        "a poll found a queued job no delivery announced: polls every {interval} "
        "until the next delivery"
    ),
    CadenceReason.GAP: "no delivery for over {window}: polls every {interval}".replace(
        "{window}", f"{DELIVERY_WINDOW / 60:.0f}m"
    ),
}


def interval_text(value: float) -> str:
    """An interval as the status shows it: ``15s``, ``5m``."""
    return f"{value / 60:g}m" if value >= 60 and value % 60 == 0 else f"{value:g}s"


def stretch_of(base: float, wanted: float | None, platform_max: float) -> float:
    """The stretched interval: the group's wish, within the platform's bound, never shorter
    than ``base``."""
    if wanted is None:
        return base
    return max(base, min(wanted, platform_max))


def decide(
    evidence: Evidence,
    *,
    now: float,
    base: float,
    stretched: float,
    webhook: bool,
    active: bool,
    managed: bool,
    hook_ok: bool | None,
    window: float = DELIVERY_WINDOW,
    gitea_heard: float | None = None,
) -> Cadence:
    """The interval until the next poll and why. ``webhook``: the group has a webhook of its
    own; ``active``: it has runner Jobs alive (or being created); ``managed``: the operator
    keeps it (then ``hook_ok`` is Gitea's last word on it,
    None before the first); ``gitea_heard``: the latest verified delivery for any group of
    the same Gitea."""
    if not webhook:
        return Cadence(base, CadenceReason.NO_WEBHOOK)
    if active:
        return Cadence(base, CadenceReason.RUNNERS_ACTIVE)
    if managed and hook_ok is not True:
        return Cadence(base, CadenceReason.HOOK_NOT_HEALTHY)
    last = evidence.last_delivery
    if last is None:
        return Cadence(base, evidence.origin)
    if evidence.last_miss is not None and evidence.last_miss >= last:
        return Cadence(base, CadenceReason.MISSED)
    latest = last if gitea_heard is None else max(last, gitea_heard)
    if now - latest >= window:
        return Cadence(base, CadenceReason.GAP)
    return Cadence(stretched, CadenceReason.DELIVERING, latest + window)
