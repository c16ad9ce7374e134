"""The handle of a group's last good answer from Gitea, kept for its teardown.

A namespace deleted whole (by a person, or by a GitOps prune) takes the group's tokens Secret
and the RoleBinding that lends it to the operator in the same breath as the group. The group's
finalizer holds the group, not its Secret: by the time its busy runners have drained, the
token can no longer be read, and without it the runners' registrations (and the webhook)
would stay in Gitea for ever. So a *deleting* group whose Secret answers are gone for good
(:data:`CREDENTIALS_GONE`) asks Gitea once more with the client of its last good answer,
which holds the token it last read. A group that is not being deleted never does: a Secret
its owner revoked stops the group's work at once.

The handle lives in the group's poll task only, like every handle (forge/observe.py): never in
a snapshot, the status or a log line, and it goes with the task.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import structlog

from gitea_runner_operator.api.credentials import CREDENTIALS_GONE
from gitea_runner_operator.api.observation import Snapshot
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.forge.observe import GiteaHandle

log = structlog.get_logger(__name__)

# Observer.observe_with: asks again with the handle of an earlier good answer.
ObserveWithFn = Callable[
    [RunnerGroupSpec, GiteaHandle], Awaitable[tuple[Snapshot, GiteaHandle | None]]
]


class LastGoodHandle:
    """One group's last good handle, and the way to ask Gitea again with it."""

    __slots__ = ("_again", "_key", "_said", "handle")

    def __init__(self, key: str, again: ObserveWithFn | None) -> None:
        self._key, self._again = key, again
        self._said = False  # the line that says it, once per group
        self.handle: GiteaHandle | None = None

    async def after(
        self,
        spec: RunnerGroupSpec,
        deleting: bool,
        snapshot: Snapshot,
        handle: GiteaHandle | None,
    ) -> tuple[Snapshot, GiteaHandle | None]:
        """The observation to act on: ``snapshot`` and ``handle`` as found, or, for a
        deleting group whose credentials are gone, the answer asked with the last good
        handle. Remembers the handle of every answer without a problem."""
        problem, kept = snapshot.problem, self.handle
        gone = problem is not None and problem.reason in CREDENTIALS_GONE
        if handle is None and gone and deleting and kept is not None and self._again is not None:
            if not self._said:
                self._said = True
                log.info(
                    "credentials gone; tearing down with the token of the last good answer",
                    group=self._key,
                    reason=problem.reason if problem is not None else None,
                )
            snapshot, handle = await self._again(spec, kept)
        if handle is not None and snapshot.problem is None:
            self.handle = handle
        return snapshot, handle
