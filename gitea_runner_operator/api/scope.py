"""Which jobs a group's runners may take: one rule each for the scope, the labels and the
repository a job belongs to, used by the accounting, the planner and the webhook router
alike (written once, so they cannot drift apart).

Gitea compares owner and repository names by their lower-case form (its ``LowerName``
columns), and its names are ASCII (api/refs.GITEA_NAME), so :func:`fold` is ``lower``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from gitea_runner_operator.api.runnergroup import Scope

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
