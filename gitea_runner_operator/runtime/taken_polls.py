"""--sharding: the groups of a domain taken over are polled at once, not once each group's
first pass has come round the work queue (hundreds are queued by one take). After a SIGKILL
their jobs have waited a Lease duration already (issue 46).

Each joins its family's book first (``Reconciler.introduce``), as its first pass would have
before any answer: a family's first answer is weighed with all of it, so an org group whose
answer came first never counts a repo group's job for want of a member not reached yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from typing import Any, Protocol

import structlog

from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.reconcile.steps.admission import Admissions

log = structlog.get_logger(__name__)


class Groups(Protocol):
    def group(self, key: str) -> dict[str, Any] | None: ...


class Book(Protocol):
    def introduce(self, key: str, spec: RunnerGroupSpec) -> None: ...


class Polls(Protocol):
    def get(self, key: str) -> object | None: ...

    async def ensure(self, key: str, spec: RunnerGroupSpec) -> object: ...


class TakenPolls:
    """Starts the poll tasks of taken groups; the pass finds each running, with its spec."""

    def __init__(
        self,
        groups: Groups,
        admissions: Admissions,
        book: Book,
        polls: Polls,
        serves: Callable[[str], bool],
    ) -> None:
        self._groups, self._admissions, self._book = groups, admissions, book
        self._polls, self._serves = polls, serves
        self._tasks: set[asyncio.Future[None]] = set()

    def start(self, keys: Collection[str]) -> None:
        task = asyncio.ensure_future(self._start(keys))
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Future[None]) -> None:
        """A start that failed is said, not left as an exception nobody retrieves: the
        groups' passes start their polls anyway, only later."""
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning("early polls of taken groups failed", error=f"{type(exc).__name__}: {exc}")

    def cancel(self) -> list[asyncio.Future[None]]:
        """Cancel the starts under way (the controller stops); returns them to await."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        return tasks

    async def _start(self, keys: Collection[str]) -> None:
        """Those its pass would poll: admitted, not being deleted, still served here (a
        refused group's poll never starts; its pass decides)."""
        specs: dict[str, RunnerGroupSpec] = {}
        for key in sorted(keys):
            group = self._groups.group(key)
            if group is None or not self._serves(key):
                continue
            meta = group.get("metadata") or {}
            admitted = self._admissions.admit(key, meta, group.get("spec"))
            spec, deleting = admitted.spec, meta.get("deletionTimestamp")
            if spec is None or admitted.invalid or admitted.refusal or deleting:
                continue
            specs[key] = spec
            self._book.introduce(key, spec)
        for key, spec in specs.items():
            if self._polls.get(key) is None and self._serves(key):
                await self._polls.ensure(key, spec)
