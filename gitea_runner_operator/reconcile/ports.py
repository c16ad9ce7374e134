"""What the reconciler needs from the runtime, as protocols, so that data flows one way:
runtime (pollers) -> reconcile (decisions) and never back by import."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gitea_runner_operator.api.cadence import Cadence
from gitea_runner_operator.api.hooks import HookStatus
from gitea_runner_operator.api.observation import Snapshot
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.reconcile.churn import Finished
from gitea_runner_operator.reconcile.scaling import Orphan, ReapCandidate


@dataclass(frozen=True, slots=True)
class ReapOrder:
    """Reaps for the group's Gitea task to check and carry out."""

    group: dict[str, Any]  # the RunnerGroup object, for Events
    candidates: tuple[ReapCandidate, ...] = ()
    orphans: tuple[Orphan, ...] = ()
    # Teardown of a group with spec.webhook.manageHook: remove its hook from Gitea as well.
    remove_hook: bool = False
    # The group is being deleted: from now on its task never creates or keeps its hook.
    deleting: bool = False


class GroupSource(Protocol):
    """One group's poll task, as the reconciler sees it."""

    @property
    def latest(self) -> Snapshot | None: ...

    @property
    def hook(self) -> HookStatus | None:
        """The last outcome of keeping the group's own hook (None: not tried yet)."""
        ...

    @property
    def hook_removed(self) -> bool:
        """A teardown's hook removal is done."""
        ...

    @property
    def kept_hook_id(self) -> int | None:
        """The id of the hook this process made for the group, if any (for the admin who
        cleans up after a teardown that gave up)."""
        ...

    @property
    def cadence(self) -> Cadence | None:
        """The poll interval in force and why (api/cadence.py; None before the first poll)."""
        ...

    def wake(self) -> None: ...

    def submit(self, order: ReapOrder) -> None: ...


class Sources(Protocol):
    def get(self, key: str) -> GroupSource | None: ...

    async def ensure(self, key: str, spec: RunnerGroupSpec) -> GroupSource: ...

    async def stop(self, key: str) -> None: ...


class Requeue(Protocol):
    """The work queue, as a writer that works after a pass sees it: it gives the group back."""

    def add(self, key: str) -> None: ...

    def add_rate_limited(self, key: str) -> None: ...


class ClusterReads(Protocol):
    def group(self, key: str) -> dict[str, Any] | None: ...
    def runner_jobs(self, key: str) -> list[dict[str, Any]]: ...
    def runner_pods(self, key: str) -> list[dict[str, Any]]: ...
    def released_since(self, key: str, since: float) -> Sequence[Finished]: ...
    def deleted_pods(self, key: str) -> list[dict[str, Any]]: ...


class ClusterWrites(Protocol):
    async def create_job(self, manifest: dict[str, Any]) -> str: ...
    async def delete_job(self, namespace: str, name: str) -> bool: ...
    async def annotate_job(
        self, namespace: str, name: str, annotations: dict[str, str]
    ) -> None: ...
    async def annotate_pod(
        self, namespace: str, name: str, annotations: dict[str, str]
    ) -> None: ...
    async def patch_group_status(
        self, namespace: str, name: str, status: dict[str, Any]
    ) -> None: ...
    async def set_finalizers(
        self, namespace: str, name: str, finalizers: list[str], resource_version: str
    ) -> None: ...
    async def emit_event(
        self, group: dict[str, Any], event_type: str, reason: str, message: str
    ) -> None: ...


class LossNotes(Protocol):
    """Loss records noted for the group's next status write (reconcile/status/parts.py): the poll
    task's follow-up reads the group through it and notes what it changed there, never
    writing the status itself."""

    def view(self, key: str, group: dict[str, Any]) -> dict[str, Any]: ...
    def note(self, key: str, records: Mapping[str, str | None]) -> None: ...


class FollowUpWrites(Protocol):
    """The cluster writes of the poll task's loss follow-up."""

    async def delete_job(self, namespace: str, name: str) -> bool: ...
    async def emit_event(
        self, group: dict[str, Any], event_type: str, reason: str, message: str
    ) -> None: ...
