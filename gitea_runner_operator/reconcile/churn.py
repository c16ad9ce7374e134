"""Progress under churn: plan from a Gitea answer that is older than the cluster's news.

In a busy group some runner finishes almost every second, so nearly every Gitea answer was
asked for before the latest finish. Waiting for an answer newer than every finish would stall
such a group; planning as if the finished runner never existed could over-create, because the
answer may still list as queued the job that runner took after the answer was asked for.

The rule: a finished Job frees its slot at once (capacity is the cluster's to know), but a
runner that finished after the answer was asked for, and that the answer did not already see
busy, still covers one unit of the answer's demand, as if it were starting. Such a runner may
have taken one of the listed jobs; one the answer saw busy (or that was marked as having
taken its job) had taken a job that the answer does not list as queued. Once an answer asked
after the finish arrives, the release drops out and the real demand counts. So a pass never
creates more runners than jobs are queued, and at worst creates a few fewer for one answer.

The same holds across a family: a runner of one group may take a job that only a peer's
answer lists (an org token restricted to some repositories, beside a repo group). Every
runner that finished and that its own group's answer does not count is offered to the
family's accounting with its finish time, and covers one job of any peer's answer asked
before it (ledger._as_of), until that peer asks again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from gitea_runner_operator.api.gitea import ActionRunner


class Finished(Protocol):
    @property
    def at(self) -> float: ...

    @property
    def job_name(self) -> str: ...

    @property
    def took_job(self) -> bool: ...


def _job_of_runner(runner_name: str) -> str:
    """The Job a runner Pod belongs to: the Pod's name less the Job controller's suffix."""
    return runner_name.rsplit("-", 1)[0]


def unsettled(finished: Iterable[Finished], runners: Iterable[ActionRunner]) -> int:
    """How many runners that finished after the answer was asked for may have taken a job the
    answer still lists as queued. ``finished`` are the releases after the answer's request."""
    return len(unsettled_names(finished, runners))


def unsettled_names(finished: Iterable[Finished], runners: Iterable[ActionRunner]) -> set[str]:
    """The runner Jobs :func:`unsettled` counts."""
    busy_jobs = {_job_of_runner(r.name) for r in runners if r.busy}
    return {f.job_name for f in finished if not f.took_job and f.job_name not in busy_jobs}


# How far back, before a group's own answer, its finished runners are still offered to its
# family's accounting: a peer's answer asked before a runner finished may list the job that
# runner took (peers poll every few seconds; an answer older than this is long replaced).
PEER_ANSWER_WINDOW = 300.0
