"""One book of every group's latest report, by group and by Gitea URL: who is in each family,
with its claimant and latest answer. The ledger (reconcile/capacity/ledger.py) computes the
families' assignments from it, and the unmatched-jobs evaluation (reconcile/why/unmatched_book.py)
reads each Gitea's members from it: kept once, each reader keeps only what it decided."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from gitea_runner_operator.api.scope import fold
from gitea_runner_operator.reconcile.capacity.accounting import Answer, Claimant


@dataclass(frozen=True, slots=True)
class Member:
    """One group as its last reconcile reported it."""

    url: str  # normalised Gitea URL
    claimant: Claimant
    answer: Answer | None  # None: no answer from Gitea yet, or a problem
    failing: bool = False  # its latest poll failed (a dead token, an unreachable Gitea)

    @property
    def couples(self) -> bool:
        """Whether the group joins a family: unless its polls fail, or while runners of it
        may take a job (peers must count them). A group that cannot answer (a dead token)
        and has no such runner lists no job and covers none, so it joins nobody: a
        ``global`` one would otherwise make every group of its Gitea sharing a label one
        family. A group that has not answered yet does join: its room makes it the first
        choice for the jobs its scope covers best."""
        c = self.claimant
        return not self.failing or c.not_busy > 0 or bool(c.busy_since)

    @property
    def shape(self) -> tuple[object, ...]:
        """What decides which family the group belongs to."""
        c = self.claimant
        return (self.url, c.scope, fold(c.org), fold(c.repo), c.offered, self.couples)

    @property
    def stamp(self) -> tuple[object, ...]:
        """What decides the family's assignment (answers compared by when they were asked)."""
        started = self.answer.started_at if self.answer is not None else None
        return (self.claimant, started)


class Members(Mapping[str, Member]):
    """Group key -> its member, with an index by Gitea URL."""

    def __init__(self) -> None:
        self._by_key: dict[str, Member] = {}
        self._by_url: dict[str, dict[str, None]] = {}

    def __getitem__(self, key: str) -> Member:
        return self._by_key[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_key)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def __len__(self) -> int:
        return len(self._by_key)

    def put(self, member: Member) -> None:
        key = member.claimant.key
        old = self._by_key.get(key)
        if old is not None and old.url != member.url:
            self._unindex(key, old.url)
        self._by_key[key] = member
        self._by_url.setdefault(member.url, {})[key] = None

    def pop(self, key: str) -> Member | None:
        old = self._by_key.pop(key, None)
        if old is not None:
            self._unindex(key, old.url)
        return old

    def of_url(self, url: str) -> list[Member]:
        """The members on one Gitea, in the order they first reported."""
        return [self._by_key[key] for key in self._by_url.get(url, ())]

    def _unindex(self, key: str, url: str) -> None:
        keys = self._by_url.get(url, {})
        keys.pop(key, None)
        if not keys:
            self._by_url.pop(url, None)
