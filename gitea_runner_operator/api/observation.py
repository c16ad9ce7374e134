"""What the operator learned about one group at one moment, as plain values.

These types sit on the ground floor so that every layer can pass them around: the pollers
(runtime) produce snapshots, the reconciler (reconcile) decides from them, and cluster I/O
(kube) reports its own problems with the same :class:`Problem`. A snapshot holds data only,
never a client or a token, so keeping one around (or logging it) leaks nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gitea_runner_operator.api.forge import ForgeInfo
from gitea_runner_operator.api.gitea import ActionJob, ActionRunner, Unserved


class ProblemKind(StrEnum):
    """Who can fix a problem, which decides how soon it is retried."""

    CONFIG = "config"  # the spec or the operator's flags: retried when the spec changes
    SECRET = "secret"  # noqa: S105 - a kind, not a password. A Secret: retried on a short fixed interval, fixing one is quick
    GITEA = "gitea"  # Gitea answered badly or not at all: retried with backoff
    CLUSTER = "cluster"  # the API server did not answer a read the poll needs: backoff too

    @property
    def backs_off(self) -> bool:
        """A peer failed, not a setting: nobody can fix it by editing, so each retry waits
        longer (an API server down for minutes must not make a thousand groups re-read their
        Secrets every few seconds), and the last answer's waiting jobs are kept meanwhile."""
        return self in (ProblemKind.GITEA, ProblemKind.CLUSTER)


@dataclass(frozen=True, slots=True)
class Problem:
    """Why a group cannot work right now. ``reason`` is a CamelCase condition reason and
    ``message`` a sentence naming the field or object at fault; neither ever holds a secret."""

    reason: str
    message: str
    kind: ProblemKind = ProblemKind.GITEA


class ProblemError(Exception):
    """A :class:`Problem` raised where it is found (a Secret, a ConfigMap key) and caught
    where a snapshot or a status reports it."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


# weakref_slot: what is derived from one answer (reconcile/scaling.queued_matching) is kept
# while the answer lives, never longer.
@dataclass(frozen=True, slots=True, weakref_slot=True)
class Observation:
    """What Gitea said at one moment. ``runners_complete`` is False when pagination was cut
    short, in which case nobody is reaped (a runner we did not see may be busy);
    ``queued_complete`` is False when the queue was cut short, so demand is a lower bound."""

    queued: tuple[ActionJob, ...]
    runners: tuple[ActionRunner, ...]
    runners_complete: bool = True
    queued_complete: bool = True
    # Jobs runners are running now, and the most recently finished ones (one page each, at
    # most once a minute): only for the latency and duration metrics, never for decisions.
    in_progress: tuple[ActionJob, ...] = ()
    finished: tuple[ActionJob, ...] = ()
    # Which forge answered (Gitea or Forgejo, and its version); None only in old tests.
    forge: ForgeInfo | None = None
    # Queued jobs no group of this Gitea could run (a label none offers): not kept, only
    # counted by label set (forge/unserved.py), for the unmatched-jobs warning and metric.
    unserved: tuple[Unserved, ...] = ()
    unserved_other: int = 0  # ... and those of label sets past the ones kept

    @property
    def unserved_jobs(self) -> int:
        """How many queued jobs were dropped because no group could run them."""
        return sum(u.count for u in self.unserved) + self.unserved_other


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One observation, or the problem that prevented it."""

    started_at: float  # monotonic: compared with the cache's change clock
    checked_at: str  # wall clock, for status.lastCheckTime
    observation: Observation | None = None
    problem: Problem | None = None
    retry_after: float | None = None
