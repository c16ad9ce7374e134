"""The one port between the receiver and the rest of the operator: what a delivery's
stages ask, in one place, implemented once (runtime/webhook_port.py) over whichever
controller acts now. The receiver runs on a thread of its own (runtime/receiver_thread.py),
so the port is also where that thread meets the controller's loop. A test hands the
receiver a small object of its own instead."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from gitea_runner_operator.sharding.forwards import Split
from gitea_runner_operator.webhook.routing import GroupDescriptor, SecretLocation


class Operator(Protocol):
    def active(self) -> bool:
        """False on a standby replica: it knows no groups, and answers 503."""
        ...

    def groups(self) -> Iterable[GroupDescriptor]:
        """The current RunnerGroups, as routing reads them (asked once per delivery)."""
        ...

    async def secret(self, where: SecretLocation) -> bytes | None:
        """A group's hook secret (cached: a flood must not become a flood of reads)."""
        ...

    def secret_at_hand(self, where: SecretLocation) -> bytes | None:
        """The same secret if it was read lately, answered without a read or a wait; None:
        ask :meth:`secret`."""
        ...

    async def split(self, keys: Sequence[str]) -> Split:
        """Which of ``keys`` this replica serves, and which replica serves the others (asked
        of the controller's loop: awaited, never blocking the receiver's)."""
        ...

    def wake(self, key: str) -> None:
        """Have the group's poll task look now; returns at once."""
        ...

    def heard(self, key: str, job_id: int | None) -> None:
        """A verified delivery for the group's scope (``job_id``: the queued job it
        announces): evidence the group's deliveries arrive (api/cadence.py)."""
        ...

    def knows(self, key: str, job_id: int) -> bool:
        """Whether the group's latest answer lists ``job_id`` as queued (no news)."""
        ...

    def asking(self, key: str) -> bool:
        """Whether the group's refresh is in flight (a delivery then waits for it)."""
        ...

    def delivered(self, outcome: str) -> None:
        """Count one delivery's outcome."""
        ...
