"""Which jobs a group's runners may take: one rule each for the scope, the labels and the
repository a job belongs to, used by the accounting, the planner and the webhook router
alike (written once, so they cannot drift apart).

Gitea compares owner and repository names by their lower-case form (its ``LowerName``
columns), and its names are ASCII (api/refs.GITEA_NAME), so :func:`fold` is ``lower``.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Iterator
from typing import Generic, TypeVar

from gitea_runner_operator.api.runnergroup import Scope

T = TypeVar("T", bound=Hashable)

_REPOS_MARK = "/api/v1/repos/"
_ACTIONS_MARK = "/actions/"


def fold(name: str | None) -> str:
    """An owner or repository name as Gitea compares it."""
    return (name or "").lower()


def scope_covers(scope: Scope, org: str | None, repo: str | None, owner: str, name: str) -> bool:
    """Whether runners registered at ``scope`` (``org``, ``repo``) may take jobs of the
    repository ``owner/name``."""
    if scope is Scope.GLOBAL:
        return True
    if fold(org) != fold(owner):
        return False
    return scope is Scope.ORG or fold(repo) == fold(name)


class ScopeIndex(Generic[T]):
    """Values (groups, or what changed of them) by the scope they stand at, so that those
    whose scope covers a repository are found by lookup, never by trying each: the
    :func:`scope_covers` rule as an index, kept once for the accounting, the unmatched-jobs
    evaluation and the family changes. A value added twice is kept once."""

    def __init__(self) -> None:
        self._repos: dict[tuple[str, str], dict[T, None]] = {}
        self._orgs: dict[str, dict[T, None]] = {}
        self._in_org: dict[str, int] = {}  # org -> repo-scope values of that org
        self._everywhere: dict[T, None] = {}

    def add(self, scope: Scope, org: str | None, repo: str | None, value: T) -> None:
        owner = fold(org)
        if scope is Scope.REPO:
            kept = self._repos.setdefault((owner, fold(repo)), {})
            if value not in kept:
                kept[value] = None
                self._in_org[owner] = self._in_org.get(owner, 0) + 1
        elif scope is Scope.ORG:
            self._orgs.setdefault(owner, {})[value] = None
        else:
            self._everywhere[value] = None

    def __bool__(self) -> bool:
        return bool(self._repos or self._orgs or self._everywhere)

    def __iter__(self) -> Iterator[T]:
        for kept in self._repos.values():
            yield from kept
        for kept in self._orgs.values():
            yield from kept
        yield from self._everywhere

    def covering(self, repository: tuple[str, str] | None) -> list[T]:
        """The values whose scope covers ``repository`` (owner, name); every value when it
        is unknown (a job whose repository cannot be read is in the scope that listed it)."""
        if repository is None:
            return list(self)
        owner, name = fold(repository[0]), fold(repository[1])
        return [
            *self._repos.get((owner, name), ()),
            *self._orgs.get(owner, ()),
            *self._everywhere,
        ]

    def covers(self, repository: tuple[str, str] | None) -> bool:
        """Whether some value's scope covers ``repository`` (unknown: whether there is any)."""
        if repository is None:
            return bool(self)
        owner, name = fold(repository[0]), fold(repository[1])
        return bool(self._everywhere or self._orgs.get(owner) or self._repos.get((owner, name)))

    def within(self, org: str | None) -> bool:
        """Whether some value stands within ``org`` (at it, at one of its repositories) or
        above it (global)."""
        owner = fold(org)
        return bool(self._everywhere or self._orgs.get(owner) or self._in_org.get(owner))


def labels_fit(job_labels: Iterable[str], offered: Collection[str]) -> bool:
    """Gitea hands a job to a runner only if *all* its ``runs-on`` labels are the runner's."""
    return all(label in offered for label in job_labels)


def repository_part(url: str) -> str:
    """The part of a job's API URL that names its repository (up to ``/actions/``): every
    job of a repository shares it, so a memo keyed by it holds one entry per repository,
    not one per job. The whole URL when it has no such part."""
    start = url.find(_REPOS_MARK)
    end = url.find(_ACTIONS_MARK, start + len(_REPOS_MARK)) if start >= 0 else -1
    return url[: end + len(_ACTIONS_MARK)] if end >= 0 else url


def repository_in_url(url: str) -> tuple[str, str] | None:
    """``(owner, name)`` as written in a job's API URL (``.../api/v1/repos/{owner}/{name}/
    actions/...``); Gitea's job payload has no repository field. None when the URL does not
    look like one."""
    start = url.find(_REPOS_MARK)
    if start < 0:
        return None
    rest = url[start + len(_REPOS_MARK) :]
    end = rest.find(_ACTIONS_MARK)
    if end < 0:
        return None
    owner, slash, name = rest[:end].partition("/")
    if not slash or not owner or not name or "/" in name:
        return None
    return owner, name
