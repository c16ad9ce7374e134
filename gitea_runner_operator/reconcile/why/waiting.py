"""Why a group's matching queued jobs are not running yet, by reason, as status and metrics.

A team whose job waits asks one question: is a runner on its way, or not, and why not. The
reconcile pass already knows each part of the answer; this puts it together, from plain data,
in the order the plan itself uses (oldest job first):

- ``servedByPeer``: another group of the family counts the job (accounting.py); the status
  names that group, so a team does not wait for a runner of its own that will never come;
- ``startingRunner``: a starting or idle runner of this group covers it, or one is created
  for it in this pass;
- ``heldBack``: this group cannot create now (quota or admission refused its runner Job, or
  it backs off after runners that did not start or take jobs), with the condition that says
  why;
- ``atCapacity``: the group runs ``maxActiveRunners`` runners; the job waits for one to end.

The oldest job's queue time is shown as a timestamp (``oldestQueuedTime``), not as an age:
an age changes every pass and would cost a status write each time; kubectl shows a
timestamp column as an age anyway.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.kit.clock import iso_seconds
from gitea_runner_operator.reconcile.why.unmatched import real_time

# Peers named in status: enough to act on, bounded for a large family.
MAX_PEERS_SHOWN = 5


@dataclass(frozen=True, slots=True)
class HeldBack:
    """Why the group cannot create a runner now: a condition's reason and its type."""

    reason: str
    condition: str


@dataclass(frozen=True, slots=True)
class Waiting:
    starting_runner: int = 0
    at_capacity: int = 0
    held_back: int = 0
    held: HeldBack | None = None
    served_by_peer: int = 0
    peers: tuple[str, ...] = ()
    oldest: dt.datetime | None = None

    def status(self) -> dict[str, Any]:
        """``status.waiting``: every field always present, so a merge patch that writes it
        leaves nothing of an earlier value behind."""
        held = self.held if self.held_back else None
        return {
            "startingRunner": self.starting_runner,
            "atCapacity": self.at_capacity,
            "heldBack": {
                "count": self.held_back,
                "reason": held.reason if held else "",
                "condition": held.condition if held else "",
            },
            "servedByPeer": {"count": self.served_by_peer, "groups": list(self.peers)},
        }

    def oldest_iso(self) -> str | None:
        if self.oldest is None:
            return None
        return iso_seconds(self.oldest)

    def counts(self) -> dict[str, int]:
        """By the metric's reason label (metrics/names.WAITING_REASONS)."""
        return {
            "starting_runner": self.starting_runner,
            "at_capacity": self.at_capacity,
            "held_back": self.held_back,
            "served_by_peer": self.served_by_peer,
        }


def peers_serving(
    matching: Iterable[ActionJob], holders: Mapping[int, str], me: str
) -> dict[str, int]:
    """How many of this group's matching jobs each other group of its family counts."""
    out: dict[str, int] = {}
    for job in matching:
        holder = holders.get(job.id)
        if holder is not None and holder != me:
            out[holder] = out.get(holder, 0) + 1
    return out


def explain_waiting(
    *,
    own: Sequence[ActionJob],
    by_peer: Mapping[str, int],
    covered: int,
    room: int,
    held: HeldBack | None,
    listed: Iterable[ActionJob] = (),
) -> Waiting:
    """Sort the group's own queued jobs (its share, or every matching job when alone) by
    reason. ``covered``: runners that will take one each (starting, idle, just created);
    ``room``: runners it may still create; ``held``: why it may not create now.
    ``listed`` are the other matching jobs it saw, for the oldest queue time."""
    waiting = len({job.id for job in own})
    starting = min(waiting, max(0, covered))
    rest = waiting - starting
    held_back = rest if held is not None else 0
    if held is None:
        more = min(rest, max(0, room))
        starting, rest = starting + more, rest - more
    times = [t for job in (*own, *listed) if (t := real_time(job.created_at)) is not None]
    return Waiting(
        starting_runner=starting,
        at_capacity=0 if held is not None else rest,
        held_back=held_back,
        held=held,
        served_by_peer=sum(by_peer.values()),
        peers=tuple(sorted(by_peer, key=lambda k: (-by_peer[k], k))[:MAX_PEERS_SHOWN]),
        oldest=min(times, default=None),
    )


def held_by_problem(previous: Mapping[str, Any], reason: str) -> Waiting:
    """A group that cannot work at all (its spec, the platform's policy, a Secret) runs no
    Gitea query either: every job it last counted (``status.queuedJobs``) is held back by
    the Ready condition, and its oldest queue time stays as last seen."""
    count = int(previous.get("queuedJobs") or 0)
    oldest = None
    with contextlib.suppress(KeyError, ValueError, TypeError):
        oldest = dt.datetime.fromisoformat(str(previous["oldestQueuedTime"]).replace("Z", "+00:00"))
    return Waiting(held_back=count, held=HeldBack(reason, "Ready"), oldest=oldest)
