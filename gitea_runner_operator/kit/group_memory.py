"""One register of what the process keeps per group, and the only two ways it is forgotten.

About fifteen objects keep something per group (expectations, admissions, the status
writer's last write, the ledger's claims, series, poll tasks, ...). Each is registered here
when it is built, so forgetting a group is one call that cannot miss a holder: ``gone``
when the group was deleted, ``handed_over`` when another replica serves it now
(``--sharding``). A holder says at registration whether a hand-over forgets it too; the
lists that named holders by hand missed two of them when sharding came, and a runner Job
then waited for an expectation to lapse.

Holders are forgotten in the order they were registered: the poll task, registered first,
stops before anything it could write to again is forgotten.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from typing import Generic, Protocol, TypeVar


class Holder(Protocol):
    """Something that keeps state per group key. ``forget`` may be a coroutine (a poll
    task is awaited as it stops); ``knows`` says whether anything of ``key`` is left, so
    that a test can hold the register to its word."""

    def forget(self, key: str) -> Awaitable[None] | None: ...

    def knows(self, key: str) -> bool: ...


H = TypeVar("H", bound=Holder)


class GroupMemory:
    def __init__(self) -> None:
        self._holders: list[tuple[Holder, bool]] = []

    def keep(self, holder: H, *, handed_over: bool = True) -> H:
        """Register ``holder``; returns it, so that a builder registers what it builds in
        the same line. ``handed_over=False``: a hand-over leaves it, and only ``gone``
        forgets it."""
        if not any(h is holder for h, _ in self._holders):
            self._holders.append((holder, handed_over))
        return holder

    @property
    def holders(self) -> list[Holder]:
        return [h for h, _ in self._holders]

    def knowing(self, key: str) -> list[Holder]:
        """The holders that still keep something of ``key``."""
        return [h for h, _ in self._holders if h.knows(key)]

    async def gone(self, key: str) -> None:
        """The group was deleted: every holder forgets it."""
        await self._forget(key, every=True)

    async def handed_over(self, key: str) -> None:
        """Another replica serves the group now: what this replica kept to act on it goes,
        and what only a deletion ends stays."""
        await self._forget(key, every=False)

    async def _forget(self, key: str, *, every: bool) -> None:
        for holder, on_hand_over in list(self._holders):
            if every or on_hand_over:
                done = holder.forget(key)
                if inspect.isawaitable(done):
                    await done


V = TypeVar("V")


class Table(Generic[V]):
    """A plain dict by group key, as a holder: the many small tables of one object need no
    holder class each."""

    def __init__(self, table: dict[str, V]) -> None:
        self._table = table

    def forget(self, key: str) -> None:
        self._table.pop(key, None)

    def knows(self, key: str) -> bool:
        return key in self._table
