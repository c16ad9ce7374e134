"""The handle of a group's last good answer from Gitea, kept for its teardown.

A namespace deleted whole (by a person, or by a GitOps prune) takes the group's tokens Secret
and the RoleBinding that lends it to the operator in the same breath as the group. The group's
finalizer holds the group, not its Secret: by the time its busy runners have drained, the
token can no longer be read, and without it the runners' registrations (and the webhook)
would stay in Gitea for ever. So a *deleting* group whose Secret answers are gone for good
(:data:`CREDENTIALS_GONE`) asks Gitea once more with the client of its last good answer,
which holds the token it last read.

That token is one nobody lends any more, so it serves only what it was kept for (issue 45):
- only while the group's *namespace* is being deleted (kube/namespaces.py): a Secret, its
  RoleBinding or its opt-in label revoked while the namespace stays is a revocation, and the
  handle is never used while it stays, deleting group or not. It is kept for the rest of the
  grace, not forgotten at once: a GitOps prune deletes the Secret and the RoleBinding
  before the Namespace (Flux deletes namespaces last), and with the handle forgotten in
  that window the teardown left a busy runner's registration in Gitea
  (`tests/gitops/test_gitops_namespace_prune.py`);
- only for the spec it came from (its scope, its generation): a scope edited after the
  revocation never gets it;
- only for :data:`LAST_GOOD_GRACE` seconds after the credentials were first found gone.
A group that is not being deleted never uses it: a Secret its owner revoked stops the
group's work at once.

The handle lives in the group's poll task only, like every handle (forge/observe.py): never in
a snapshot, the status or a log line, and it goes with the task.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import structlog

from gitea_runner_operator.api.credentials import CREDENTIALS_GONE
from gitea_runner_operator.api.naming import GroupKey
from gitea_runner_operator.api.observation import Snapshot
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.forge.observe import GiteaHandle

log = structlog.get_logger(__name__)

# How long after its credentials were first found gone a deleting group may still use the
# token of its last good answer: long enough for the teardown's reaps (the namespace's runner
# Pods go with it: the GitOps prune on the testbed took 50-58 s with drainTimeout 30 s),
# short enough that a token is not used long after it went (before: drainTimeout + 30 s).
LAST_GOOD_GRACE = 120.0

# Observer.observe_with: asks again with the handle of an earlier good answer.
ObserveWithFn = Callable[
    [RunnerGroupSpec, GiteaHandle, str], Awaitable[tuple[Snapshot, GiteaHandle | None]]
]
# kube/namespaces.NamespaceReader.deleting: whether a namespace is being deleted whole.
NamespaceDeletingFn = Callable[[str], Awaitable[bool]]


class LastGoodHandle:
    """One group's last good handle, the spec it came from, and the way to ask Gitea again
    with it. ``namespace_deleting`` unset: never asked again."""

    __slots__ = (
        "_again",
        "_clock",
        "_gone_since",
        "_grace",
        "_key",
        "_namespace_deleting",
        "_said",
        "_spec",
        "handle",
    )

    def __init__(
        self,
        key: str,
        again: ObserveWithFn | None,
        namespace_deleting: NamespaceDeletingFn | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        grace: float = LAST_GOOD_GRACE,
    ) -> None:
        self._key, self._again = key, again
        self._namespace_deleting = namespace_deleting
        self._clock, self._grace = clock, grace
        self._said = False  # the line that says it, once per group
        self.handle: GiteaHandle | None = None
        self._spec: RunnerGroupSpec | None = None  # the spec the handle came from
        self._gone_since: float | None = None  # when its credentials were first found gone

    def take(self, other: LastGoodHandle) -> None:
        """What the group's previous poll task kept (a restarted task): served only for
        the spec it came from, so a new spec's task keeps it and never uses it."""
        self.handle, self._spec, self._gone_since = other.handle, other._spec, other._gone_since

    def forget(self) -> None:
        self.handle = self._spec = self._gone_since = None

    async def after(
        self,
        spec: RunnerGroupSpec,
        deleting: bool,
        snapshot: Snapshot,
        handle: GiteaHandle | None,
    ) -> tuple[Snapshot, GiteaHandle | None]:
        """The observation to act on: ``snapshot`` and ``handle`` as found, or, for a
        deleting group of a namespace being deleted whose credentials are gone, the answer
        asked with the last good handle (module docstring). Remembers the handle of every
        answer without a problem, and the spec it came from."""
        problem = snapshot.problem
        gone = problem is not None and problem.reason in CREDENTIALS_GONE
        if handle is None and gone and self.handle is not None:
            kept = self.handle
            if await self._may_serve(spec, deleting) and self._again is not None:
                if not self._said:
                    self._said = True
                    log.info(
                        "credentials gone with the namespace; tearing down with the token of "
                        "the last good answer",
                        group=self._key,
                        reason=problem.reason if problem is not None else None,
                        grace=self._grace,
                    )
                return await self._again(spec, kept, GroupKey.parse(self._key).namespace)
        if handle is not None and snapshot.problem is None:
            self.handle, self._spec, self._gone_since = handle, spec, None
        return snapshot, handle

    async def _may_serve(self, spec: RunnerGroupSpec, deleting: bool) -> bool:
        """Whether the kept handle may serve now; forgets it when it never will again."""
        now = self._clock()
        if self._gone_since is None:
            self._gone_since = now
        if spec != self._spec or now - self._gone_since > self._grace:
            self.forget()  # another scope or generation, or past its grace
            return False
        if self._namespace_deleting is None:
            return False
        namespace = GroupKey.parse(self._key).namespace
        if not await self._namespace_deleting(namespace):
            # Revoked while the namespace stays: not used now, nor ever while it stays. Kept
            # for the rest of the grace, not forgotten: a GitOps prune (Flux, Argo CD)
            # deletes a team's Secret and RoleBinding before its Namespace, and the
            # teardown that follows must still reach Gitea once the Namespace goes.
            return False
        return deleting
