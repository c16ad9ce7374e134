"""Reading ahead: the Jobs and Pods of the domains this replica expects to take next,
fetched before the take (sharding/tenure.ahead says which), so that the take opens its
groups at once instead of fetching then.

A domain is expected when this replica's view gives it the domain, or will once a peer
whose record has stayed unchanged for most of its Lease duration lapses. Reading gives no
right: the groups open to the workers only at the take, under the fencing rule
(sharding/tenure.py). What is read ahead is kept current by the watches from its list on
(kube/narrowed.py), so it stays level-triggered however long the take waits; if the take
does not come (the peer renewed after all), the groups' objects are dropped again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import structlog

from gitea_runner_operator.sharding.tenure import Layout

log = structlog.get_logger(__name__)


class ReadAhead:
    """The domains read ahead now, their groups, and the fetch under way."""

    def __init__(
        self,
        prepare: Callable[[frozenset[str]], Awaitable[None]] | None,
        unprepare: Callable[[frozenset[str]], None] | None,
    ) -> None:
        self._prepare, self._unprepare = prepare, unprepare
        self.domains: frozenset[str] = frozenset()
        self.keys: frozenset[str] = frozenset()
        self._task: asyncio.Future[None] | None = None

    def follow(self, domains: frozenset[str], layout: Layout, held: frozenset[str]) -> None:
        """Read ahead the groups of ``domains`` (not held), and no others; ``held``: the
        groups held now, which the take's own fetch keeps."""
        if self._prepare is None:
            return
        keys = frozenset(k for d in domains for k in layout.domains.get(d, ())) - held
        if keys == self.keys:
            self.domains = domains
            return
        before, self.domains, self.keys = self.keys, domains, keys
        if keys < before and before - keys <= held:
            return  # only taken since: the fetch under way is the take's to wait for
        self._cancel()
        gone = before - keys - held
        if gone and self._unprepare is not None:
            self._unprepare(gone)
        if keys:
            log.debug("reading ahead the Jobs and Pods of domains to take", groups=len(keys))
            self._task = asyncio.ensure_future(self._read(keys))

    async def settle(self, keys: frozenset[str], within: float) -> None:
        """Wait, ``within`` seconds at most, for a read ahead of any of ``keys`` under way: the
        take's fetch then finds them fetched rather than listing them a second time."""
        task = self._task
        if task is not None and not task.done() and keys & self.keys:
            await asyncio.wait({task}, timeout=max(0.0, within))

    def forget(self, held: frozenset[str]) -> None:
        """Read nothing ahead any more (stepping down, stopping)."""
        self.follow(frozenset(), Layout("", {}), held)

    def _cancel(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task = None

    async def _read(self, keys: frozenset[str]) -> None:
        assert self._prepare is not None
        began = time.monotonic()
        with contextlib.suppress(Exception):  # the take fetches what is still missing
            await self._prepare(keys)
            log.debug("read ahead", groups=len(keys), seconds=round(time.monotonic() - began, 2))
            return
        log.debug("read ahead failed: the take fetches", groups=len(keys))
