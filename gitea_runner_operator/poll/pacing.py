"""When a group's poll task asks Gitea again after a failure.

Retry policy, by who can fix the problem:
- Gitea failures back off (doubling from the poll interval to ``backoff_max``, 30 s by
  default, or as long as Gitea's capped Retry-After says), gentle on a struggling Gitea yet
  quick to recover once it is healthy; wake-ups do not shorten the backoff.
- The API server failing a read the poll needs (the token's Secret) backs off the same way:
  a thousand groups retrying every few seconds would load it as it recovers, and cost the
  operator more while it waits than while it works.
- Secret problems are retried on a short fixed interval: creating or labelling a Secret
  takes effect within seconds.
- Configuration problems (a URL outside the allow-list) wait for the next interval.
"""

from __future__ import annotations

from dataclasses import dataclass

from gitea_runner_operator.api.observation import ProblemKind
from gitea_runner_operator.kit.backoff import doubling
from gitea_runner_operator.poll.triggers import RESYNC
from gitea_runner_operator.settings import GITEA_STEP_DEADLINE

DEFAULT_BACKOFF_MAX = 30.0
SECRET_RETRY = 3.0


@dataclass(frozen=True, slots=True)
class Pacing:
    """How often a group's poll task asks Gitea, and how long each ask and step may take:
    the same for every group of the operator (its flags), so one value is handed on."""

    min_refresh: float = 0.5  # never observe again sooner, whatever wakes the task
    backoff_max: float = DEFAULT_BACKOFF_MAX
    secret_retry: float = SECRET_RETRY
    resync: float = RESYNC  # an unchanged answer still reaches the reconcile this often
    step_deadline: float = GITEA_STEP_DEADLINE  # each Gitea step after an observation
    observe_deadline: float = GITEA_STEP_DEADLINE  # one observation, past it the task hangs
    # Longest a poll stretches to while a group's deliveries arrive (api/cadence.py).
    max_webhook_poll: float = 900.0


def next_delay(
    interval: float,
    failures: int,
    retry_after: float | None,
    kind: ProblemKind | None = None,
    backoff_max: float = DEFAULT_BACKOFF_MAX,
    secret_retry: float = SECRET_RETRY,
) -> float:
    """Seconds until the next poll."""
    if failures == 0 or kind is None:
        return interval
    if kind is ProblemKind.SECRET:
        return secret_retry
    if kind is ProblemKind.CONFIG:
        return interval
    backoff = doubling(interval, max(backoff_max, interval), failures)
    if retry_after is not None:
        return max(retry_after, backoff)
    return backoff
