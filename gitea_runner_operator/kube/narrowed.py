"""``--sharding``: the runner Jobs and Pods one replica keeps, and watches narrowed by the API
server to them.

A replica holds whole shard buckets (sharding/tenure.owner; api/shard.py), and every runner
Job and Pod carries its domain's bucket (``SHARD_LABEL``, set at creation). So its owned
informers select ``shard in (<buckets>)`` and the API server sends it only its share of the
events (``watch_events_received`` counts what arrives). Two more rules keep that exact:

- **Objects without the label** (made by a version before it) are watched by one more
  informer per namespace, ``!shard``, gated by :meth:`OwnedShare.admits` as every owned
  informer is; runner Jobs are short-lived, so it empties soon after an upgrade.
- **Objects of an older bucket**: a domain that merged or split has a new id, so a new
  bucket, while the Jobs made before keep the label they were made with (and their Pods
  too: a Job's Pod template cannot change, so relabelling the Job would hide the Pods it
  makes later from the watch that reads them, and busy-runner detection reads Pods). The
  selected buckets are therefore the held domains' buckets *plus* the buckets of every kept
  object of a served group: the old bucket stays selected, its other objects dropped by
  ``admits``, until the last such Job is gone. No write, no relabel.

When a group is taken (:meth:`OwnedShare.serve`) it opens only after (1) the informers run
by a selector that covers its domain's bucket (a reselect waits for the list by the new
selector), and (2) a listing by its name, any bucket, has put its objects in the informer
that watches them, or, for a bucket not selected yet, widened the selector and waited for
that list. Level-triggered: every object of the group is then either in the cache through
a list whose watch runs on, or was listed while that watch ran (``Informer.fetch`` keeps
the watch's word); nothing else makes objects for it (the old owner stopped before the
take, fenced); what this replica makes for it carries a selected bucket.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from gitea_runner_operator.api import constants
from gitea_runner_operator.kube.http import LIST_TIMEOUT, send
from gitea_runner_operator.kube.informer import Informer
from gitea_runner_operator.objects.slim import Obj

GroupKey = str
# A value no runner Job carries: the selector of a replica that holds no bucket.
NO_SHARD = "none"
UNLABELLED_SELECTOR = f"{constants.MANAGED_SELECTOR},!{constants.SHARD_LABEL}"
# Group names per listing of a group's objects: a selector ``name in (...)`` stays far below
# any URL limit (names are at most 63 characters).
SELECTOR_NAMES = 50


def shard_selector(shards: Iterable[str]) -> str:
    """The owned informers' selector for the bucket label values ``shards``."""
    values = ",".join(sorted(set(shards), key=_order)) or NO_SHARD
    return f"{constants.MANAGED_SELECTOR},{constants.SHARD_LABEL} in ({values})"


def shard_of_object(obj: Obj) -> str | None:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(constants.SHARD_LABEL)


def group_key_of_owned(obj: Obj) -> GroupKey | None:
    meta = obj.get("metadata") or {}
    name = (meta.get("labels") or {}).get(constants.GROUP_NAME_LABEL)
    return f"{meta.get('namespace')}/{name}" if name else None


class OwnedShare:
    """The groups a replica serves, and the buckets its owned informers select."""

    def __init__(
        self,
        narrowed: dict[str, list[Informer]],
        unlabelled: dict[str, list[Informer]],
        listers: dict[str, Callable[..., Any]],
    ) -> None:
        # By resource (jobs, pods): one informer per watched namespace, or one for all.
        self._narrowed, self._unlabelled, self._listers = narrowed, unlabelled, listers
        self.served: set[GroupKey] = set()
        self.fetched: set[GroupKey] = set()  # served groups whose objects were fetched
        self.selected: frozenset[str] = frozenset()  # bucket label values selected now
        self._serving = 0  # serves under way: a lazy narrowing waits for them

    def admits(self, obj: Obj) -> bool:
        key = group_key_of_owned(obj)
        return key is not None and key in self.served

    def informers(self) -> list[Informer]:
        return [
            i for table in (self._narrowed, self._unlabelled) for v in table.values() for i in v
        ]

    def kept_shards(self) -> set[str]:
        """The buckets of the objects kept now (all of served groups: ``admits``)."""
        return {
            shard
            for informers in self._narrowed.values()
            for informer in informers
            for obj in informer.cache.values()
            if (shard := shard_of_object(obj)) is not None
        }

    async def serve(self, keys: Iterable[GroupKey], shards: Iterable[str]) -> None:
        """Begin to keep the Jobs and Pods of ``keys``, whose domains' buckets are among
        ``shards`` (all the replica holds): see the module's docstring for when they are
        whole. Raises if a listing failed; the caller tries again."""
        wanted = set(keys) - self.fetched  # a retry fetches only what is still missing
        self.served |= wanted
        self._serving += 1
        try:
            await self._select({*shards, *self.kept_shards()})
            found: set[str] = set()
            by_namespace: dict[str, list[str]] = {}
            for key in sorted(wanted):
                namespace, _, name = key.partition("/")
                by_namespace.setdefault(namespace, []).append(name)

            async def fetch_in(namespace: str, names: list[str]) -> None:
                nonlocal found
                for i in range(0, len(names), SELECTOR_NAMES):
                    found |= await self._fetch(namespace, names[i : i + SELECTOR_NAMES])

            await side_by_side(fetch_in(ns, names) for ns, names in by_namespace.items())
            if found - self.selected:  # older buckets of the groups taken (merged or split)
                await self._select(self.selected | found)
            self.fetched |= wanted
        finally:
            self._serving -= 1

    def narrow(self, shards: Iterable[str]) -> None:
        """After a round: stop selecting the buckets nothing needs any more (released, or
        the last object of an older bucket gone). Lazy: no serve waits for it, and none
        runs while a serve is under way (whose older buckets are not kept yet)."""
        held = frozenset(shards)
        if self._serving or self.selected <= held:
            return  # (the scan of the kept objects only when something may go)
        wanted = held | self.kept_shards()
        if wanted < self.selected:
            self._reselect(wanted)

    def unserve(self, keys: set[GroupKey]) -> None:
        self.served -= keys
        self.fetched -= keys

        def theirs(obj: Obj) -> bool:
            return group_key_of_owned(obj) in keys

        for informer in self.informers():
            informer.drop(theirs)

    async def _select(self, shards: Iterable[str]) -> None:
        """Select ``shards`` (exactly, or with what is selected already while another serve
        is under way, which may need more) and wait until every running owned informer has
        listed by the selection."""
        wanted = frozenset(shards)
        while True:
            self._reselect(wanted | self.selected if self._serving > 1 else wanted)
            narrowed = [i for v in self._narrowed.values() for i in v if i.running]
            await asyncio.gather(*(i.synced.wait() for i in narrowed))
            if wanted <= self.selected:
                return

    def _reselect(self, shards: frozenset[str]) -> None:
        if shards == self.selected:
            return
        self.selected = shards
        selector = shard_selector(shards)
        for informers in self._narrowed.values():
            for informer in informers:
                informer.reselect(selector)

    async def _fetch(self, namespace: str, names: list[str]) -> set[str]:
        """One listing of the namespace's runner Jobs, then one of its Pods, narrowed to
        ``names`` by a set-based selector (any bucket), each object into the informer whose
        selector picks it. The buckets found that are not selected are returned."""
        sel = f"{constants.MANAGED_SELECTOR},{constants.GROUP_NAME_LABEL} in ({','.join(names)})"
        found: set[str] = set()
        for resource, lister in self._listers.items():
            narrowed = _informer_for(self._narrowed[resource], namespace)
            unlabelled = _informer_for(self._unlabelled[resource], namespace)
            if narrowed is None or unlabelled is None:
                continue
            listing = _Shared(_items, lister, namespace, sel)
            selected = self.selected

            def picked(obj: Obj, selected: frozenset[str] = selected) -> bool:
                shard = shard_of_object(obj)
                if shard is not None and shard not in selected:
                    found.add(shard)
                return shard in selected

            try:
                await asyncio.gather(
                    narrowed.fetch(listing.result(), picked),
                    unlabelled.fetch(listing.result(), lambda obj: shard_of_object(obj) is None),
                )
            finally:
                listing.cancel()
        return found


class _Shared:
    """One listing read by two informers' fetches: it starts when the first awaits it, so
    both note the watch events that arrive while it runs (Informer.fetch)."""

    def __init__(self, func: Callable[..., Awaitable[list[Obj]]], *args: Any) -> None:
        self._func, self._args = func, args
        self._task: asyncio.Future[list[Obj]] | None = None

    async def result(self) -> list[Obj]:
        if self._task is None:
            self._task = asyncio.ensure_future(self._func(*self._args))
        return await asyncio.shield(self._task)

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()


# Namespaces fetched at once when a share is taken: one after the other, a SIGKILLed
# replica's groups in 4 namespaces waited 2.7 s for 12 lists on a busy API server.
FETCH_NAMESPACES_AT_ONCE = 4


async def side_by_side(fetches: Iterable[Awaitable[None]]) -> None:
    """The fetches of a take, :data:`FETCH_NAMESPACES_AT_ONCE` at a time; one that fails (or
    the round giving up) cancels the others, so none goes on alone."""
    slots = asyncio.Semaphore(FETCH_NAMESPACES_AT_ONCE)

    async def one(fetch: Awaitable[None]) -> None:
        async with slots:
            await fetch

    tasks = [asyncio.ensure_future(one(fetch)) for fetch in fetches]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _informer_for(informers: list[Informer], namespace: str) -> Informer | None:
    if len(informers) == 1 and informers[0].name.endswith("/*"):
        return informers[0]
    return next((i for i in informers if i.name.endswith(f"/{namespace}")), None)


def _order(value: str) -> tuple[int, str]:
    return (int(value), value) if value.isdigit() else (-1, value)


async def _items(list_func: Callable[..., Any], namespace: str, selector: str | None) -> list[Obj]:
    narrowed = {"label_selector": selector} if selector else {}
    body = await send(
        list_func(namespace, **narrowed, _preload_content=False, _request_timeout=LIST_TIMEOUT)
    )
    return list(body.get("items") or [])
