"""Builders for the accounting tests: queued jobs, claimants and a ledger report, shared by the
accounting, ledger and trigger tests."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.reconcile.capacity.accounting import Answer, Claimant

LINUX = frozenset({"linux"})


def job(i: int, repo: str = "acme/app", labels: tuple[str, ...] = ("linux",)) -> ActionJob:
    return ActionJob(
        id=i,
        labels=labels,
        status="queued",
        url=f"https://g.test/api/v1/repos/{repo}/actions/jobs/{i}",
    )


def group(
    key: str,
    scope: Scope,
    org: str | None = None,
    repo: str | None = None,
    *,
    spare: int = 5,
    not_busy: int = 0,
    offered: frozenset[str] = LINUX,
) -> Claimant:
    return Claimant(key, scope, org, repo, offered, not_busy=not_busy, spare=spare)


def report(
    ledger: Any,
    c: Claimant,
    jobs: Iterable[ActionJob] | None = (),
    started: float = 1.0,
    url: str = "https://g.test",
) -> None:
    ledger.report(url, c, Answer(c.key, started, list(jobs)) if jobs is not None else None)
