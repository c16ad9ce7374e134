"""What changed in a family of groups since its last assignment, by the scopes it touched:
which members' shares may have moved, so the others keep creating from theirs.

A member's share and headroom are read from the family's last assignment
(reconcile/capacity/ledger.py); once an input changed, a share may be out of date ("stale")
and its group creates nothing until the assignment is recomputed, at most every
``ledger.MIN_INTERVAL``. In a family of one org group and 1,000 repo groups that fill at
once, every member's report made every other member's share stale, so only the group that
triggered the computation (and those told their share grew) created in each half second: 10
runner Jobs a second.

A share moves only through a peer whose scope overlaps its own: a job of repository R is
counted among the groups that cover R (R's repo groups, its org's org groups and the global
ones, accounting.py), whether a job there is still queued is decided by those groups'
answers (current_jobs), and so is the headroom (headroom counts the not-busy runners of the
groups that could take R's jobs). So a change of a repo group of R touches R's repo groups,
and any org or global group (they cover R); a change of an org group touches every group
within that org; a change of a global group touches every group. Two things reach further
and make every share stale: a listed job whose repository is unknown (every group is its
candidate), and a change of membership (the ledger recomputes the families).

What stays out: a repo group whose own repository's jobs fit its room takes them whatever
other repositories do; only once its room is exhausted can a far peer's spill to a shared org
group decide whether its overflow goes to that org group or stays with it (AtCapacity), and
then it has no room to create for it anyway. The oldest answer of the family (ledger._as_of)
only grows with time, which lowers a group's count of busy runners as covering, so a stale
share errs on the side of creating less.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.api.scope import ScopeIndex
from gitea_runner_operator.reconcile.capacity.accounting import Claimant, job_repository


def lists_unknown_repository(jobs: Sequence[ActionJob]) -> bool:
    """Whether an answer lists a job whose repository cannot be read from its URL."""
    return any(job_repository(job) is None for job in jobs)


@dataclass(slots=True)
class Changes:
    """The members of one family that changed since its last assignment, by Gitea and
    scope."""

    everything: bool = False
    by_url: dict[str, ScopeIndex[str]] = field(default_factory=dict)

    def add(self, url: str, claimant: Claimant, *, reaches_all: bool = False) -> None:
        """``claimant`` of Gitea ``url`` changed; ``reaches_all``: its answer (before or now)
        lists a job of unknown repository."""
        if reaches_all:
            self.everything = True
            return
        index = self.by_url.setdefault(url, ScopeIndex())
        index.add(claimant.scope, claimant.org, claimant.repo, claimant.key)

    def touches(self, url: str, claimant: Claimant) -> bool:
        """Whether these changes may have moved ``claimant``'s share or headroom: a change
        of a peer whose scope covers its repository (a repo group), stands within its org
        (an org group), or any change on its Gitea (a global group)."""
        if self.everything:
            return True
        index = self.by_url.get(url)
        if index is None:
            return False
        if claimant.scope is Scope.REPO:
            return index.covers((claimant.org or "", claimant.repo or ""))
        if claimant.scope is Scope.ORG:
            return index.within(claimant.org)
        return bool(index)
