"""List-then-watch caches of raw API objects, in the manner of client-go's reflector.

- List, then watch from the list's resourceVersion with bookmarks and a server-side timeout
  randomised in 5-10 minutes; a clean end of the stream means "watch again from the last
  resourceVersion"; 410 Gone (as an HTTP status or an ERROR event) means "list again".
- On every re-list, objects that vanished from the cache get a synthesised DELETED event:
  a lost watch event can delay a decision but never make us forget an object.
- Failures back off from 0.8 s, doubling to 30 s, and reset after a successful list.
- A new label selector (:meth:`Informer.reselect`, the share of a ``--sharding`` replica)
  ends the running list or watch and lists again with it: what the new selector no longer
  picks leaves the cache as any vanished object does (a DELETED event).

Objects stay raw dicts (camelCase, exactly as the API server sends them) so that the pure
decision code reads the same shapes as the YAML users write.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.watch import Watch

from gitea_runner_operator.kit.backoff import doubling, jittered
from gitea_runner_operator.kube.http import (
    LIST_TIMEOUT,
    WATCH_GRACE,
    WATCH_TIMEOUT_MAX,
    WATCH_TIMEOUT_MIN,
    send,
)
from gitea_runner_operator.objects.slim import Obj, strip_managed_fields

log = structlog.get_logger(__name__)

# (event type, new object, old object or None)
Handler = Callable[[str, Obj, Obj | None], None]
ListFunc = Callable[..., Awaitable[Any]]


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


# A failed list or watch is retried after 0.8 s, doubling up to 30 s.
RETRY_BASE = 0.8
RETRY_MAX = 30.0


class Informer:
    """One resource in one namespace (or all). ``cache`` maps ``namespace/name`` to object."""

    def __init__(
        self,
        name: str,
        list_func: ListFunc,
        *args: Any,
        label_selector: str | None = None,
        handler: Handler | None = None,
        transform: Callable[[Obj], Obj] | None = None,
        admit: Callable[[Obj], bool] | None = None,
        min_watch_timeout: int = WATCH_TIMEOUT_MIN,
        max_watch_timeout: int = WATCH_TIMEOUT_MAX,
    ) -> None:
        self.name = name
        self._list_func = list_func
        self._args = args
        self._label_selector = label_selector
        # Applied to every object before it is cached: drops what the operator never reads,
        # so thousands of runner Jobs and Pods do not cost their managedFields in memory.
        self._transform = transform or strip_managed_fields
        # --sharding: objects of groups this replica does not serve are dropped as they come
        # in (read raw, before the transform), so a replica caches only its share. None:
        # every object is kept (one replica).
        self._admit = admit
        self._touched: set[str] | None = None  # keys the watch changed while a fetch ran
        self._handlers: list[Handler] = [handler] if handler else []
        self._min_timeout = min_watch_timeout
        self._max_timeout = max_watch_timeout
        self.cache: dict[str, Obj] = {}
        self.synced = asyncio.Event()
        self.relists = 0
        self._cycle: asyncio.Future[None] | None = None  # the list and watch under way
        self._failures = 0
        # Watch events received (bookmarks aside), kept or dropped by ``admit``: what the API
        # server sends this replica (metrics: watch_events_received).
        self.received = 0

    def add_handler(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def _kwargs(self) -> dict[str, Any]:
        return {"label_selector": self._label_selector} if self._label_selector else {}

    @property
    def label_selector(self) -> str | None:
        return self._label_selector

    @property
    def running(self) -> bool:
        """Whether :meth:`run` has begun: only then does :attr:`synced` follow a reselect."""
        return self._cycle is not None

    def reselect(self, label_selector: str) -> bool:
        """List and watch by ``label_selector`` from now on: the list or watch under way
        ends, and :attr:`synced` is clear until the list by the new selector is in. True
        when the selector changed."""
        if label_selector == self._label_selector:
            return False
        self._label_selector = label_selector
        self.synced.clear()
        if self._cycle is not None and not self._cycle.done():
            self._cycle.cancel()
        return True

    async def run(self) -> None:
        """Run until cancelled. Never raises for API trouble; it logs and retries."""
        while True:
            cycle = self._cycle = asyncio.ensure_future(self._list_and_watch())
            try:
                await cycle
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    cycle.cancel()
                    raise
                # Only the cycle was cancelled: reselect asked for a list by a new selector.
                self._failures = 0
                continue
            except ApiException as exc:
                if exc.status == 410:
                    log.info("watch expired, listing again", informer=self.name)
                    continue
                hint = (
                    "is the RunnerGroup CRD installed? (kubectl apply -f manifests/crd.yaml)"
                    if exc.status == 404 and self.name.startswith("runnergroups")
                    else "check the operator's RBAC (manifests/rbac.yaml)"
                    if exc.status == 403
                    else None
                )
                log.warning(
                    "list/watch failed",
                    informer=self.name,
                    status=exc.status,
                    reason=exc.reason,
                    hint=hint,
                )
            except Exception as exc:
                log.warning("list/watch failed", informer=self.name, error=repr(exc))
            self._failures += 1
            delay = doubling(RETRY_BASE, RETRY_MAX, self._failures)
            await asyncio.sleep(jittered(delay, 0.9, 1.1))

    async def _list_and_watch(self) -> None:
        resource_version = await self._list()
        self._failures = 0
        await self._watch_from(resource_version)

    async def _list(self) -> str:
        # An error answer raises (send checks the status): it must never read as an empty
        # list, which would synthesise a deletion of every cached object.
        body = await send(
            self._list_func(
                *self._args, **self._kwargs(), _preload_content=False, _request_timeout=LIST_TIMEOUT
            )
        )
        admit = self._admit
        fresh = {
            object_key(item): self._transform(item)
            for item in body.get("items") or []
            if admit is None or admit(item)
        }
        old, self.cache = self.cache, fresh
        self.relists += 1
        if self._touched is not None:  # a fetch under way: the list and its watch are newer
            self._touched.update(fresh)
        for key, obj in old.items():
            if key not in fresh:
                self._emit("DELETED", obj, obj)
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None:
                self._emit("ADDED", obj, None)
            elif _rv(before) != _rv(obj):
                self._emit("MODIFIED", obj, before)
        self.synced.set()
        return str(body.get("metadata", {}).get("resourceVersion", ""))

    async def _watch_from(self, resource_version: str) -> None:
        while True:
            timeout = random.randint(self._min_timeout, self._max_timeout)  # noqa: S311
            watch = Watch(return_type="object")
            async with watch:
                stream = watch.stream(
                    self._list_func,
                    *self._args,
                    **self._kwargs(),
                    resource_version=resource_version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=timeout,
                    _request_timeout=timeout + WATCH_GRACE,
                )
                async for event in stream:
                    kind = event["type"]
                    obj = event["raw_object"]
                    resource_version = _rv(obj) or resource_version
                    if kind == "BOOKMARK":
                        continue
                    self.received += 1
                    if kind == "ADDED":  # the trail of what this replica was sent
                        log.debug("watch added", informer=self.name, object=object_key(obj))
                    self._apply(kind, obj)
            # The server ended the watch at its timeout: resume from where we are.

    def _apply(self, kind: str, obj: Obj) -> None:
        key = object_key(obj)
        if self._admit is not None and key not in self.cache and not self._admit(obj):
            return  # another replica's group: not kept, not told
        obj = self._transform(obj)
        before = self.cache.get(key)
        if self._touched is not None:
            self._touched.add(key)
        if kind == "DELETED":
            self.cache.pop(key, None)
        else:
            self.cache[key] = obj
        self._emit(kind, obj, before)

    async def fetch(
        self, listing: Awaitable[list[Obj]], keep: Callable[[Obj], bool] | None = None
    ) -> int:
        """Add what ``listing`` returns (raw objects the admit rule now lets in, read by the
        caller with a narrower selector) as if listed, so that a group this replica begins
        to serve is seen whole before anyone acts on it. An object the watch changed or
        deleted while the listing ran keeps the watch's word: the watch is in order and
        will bring whatever followed, while the listing may be older than that event.
        ``keep``: which of the listed objects are this informer's (its selector's). The
        number of objects added or changed."""
        touched: set[str] = set()
        self._touched = touched
        try:
            items = await listing
        finally:
            self._touched = None
        added = 0
        for item in items:
            key = object_key(item)
            if key in touched or (self._admit is not None and not self._admit(item)):
                continue
            if keep is not None and not keep(item):
                continue
            obj = self._transform(item)
            before = self.cache.get(key)
            if before is not None and _rv(before) == _rv(obj):
                continue
            self.cache[key] = obj
            added += 1
            self._emit("MODIFIED" if before is not None else "ADDED", obj, before)
        return added

    async def refresh(self, listing: Awaitable[list[Obj]], keys: set[str]) -> None:
        """Read ``keys`` again from ``listing`` through the transform, as cached now (the
        same resourceVersion: the transform now keeps more of them), telling no handler:
        nothing changed but what this replica keeps. One the watch changed meanwhile keeps
        the watch's word."""
        for item in await listing:
            key = object_key(item)
            before = self.cache.get(key)
            if key in keys and before is not None and _rv(before) == _rv(item):
                self.cache[key] = self._transform(item)

    def reshape(self, keys: set[str]) -> None:
        """Pass the cached ``keys`` through the transform again (it now keeps less)."""
        for key in keys & self.cache.keys():
            self.cache[key] = self._transform(self.cache[key])

    def drop(self, which: Callable[[Obj], bool]) -> list[Obj]:
        """Forget the cached objects ``which`` selects, telling no handler: the groups they
        belong to are served elsewhere now, and nothing here acts on them any more."""
        gone = [key for key, obj in self.cache.items() if which(obj)]
        return [self.cache.pop(key) for key in gone]

    def _emit(self, kind: str, obj: Obj, before: Obj | None) -> None:
        for handler in self._handlers:
            try:
                handler(kind, obj, before)
            except Exception:
                log.exception("informer handler failed", informer=self.name)


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))
