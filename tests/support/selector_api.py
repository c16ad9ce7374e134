"""An API server of runner Jobs or Pods that answers lists and watches by label selector
(``k=v``, ``k in (a,b)``, ``!k``): what narrows a --sharding replica's watches. Each watch
gets the events of the objects its selector picks, so a test can count what a replica is
sent, as the real API server sends it."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any


def _terms(selector: str) -> list[str]:
    """The selector's terms: its commas outside parentheses split them."""
    return [t.strip() for t in re.split(r",(?![^(]*\))", selector) if t.strip()]


def matches(selector: str | None, labels: dict[str, str]) -> bool:
    for term in _terms(selector or ""):
        if term.startswith("!"):
            if term[1:] in labels:
                return False
        elif " in (" in term:
            key, values = term.split(" in (", 1)
            if labels.get(key) not in values.rstrip(")").split(","):
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key) != value:
                return False
    return True


class _Response:
    status = 200
    reason = "OK"

    def __init__(self, body: Any = None, queue: asyncio.Queue[bytes] | None = None) -> None:
        self._body, self._queue = body, queue
        self.content = self

    async def read(self) -> bytes:
        return json.dumps(self._body).encode()

    async def readline(self) -> bytes:
        assert self._queue is not None
        return await self._queue.get()

    def release(self) -> None:
        pass

    def close(self) -> None:
        pass


class SelectorAPI:
    """``list_namespaced_*`` (namespace first) of one resource, lists and watches."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 1
        self.selectors: list[tuple[str, str | None]] = []  # ("list" or "watch", selector)
        self._watches: list[tuple[str | None, asyncio.Queue[bytes]]] = []

    def put(self, obj: dict[str, Any], kind: str = "ADDED") -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.objects.pop(name, None)
        else:
            self.objects[name] = obj
        line = json.dumps({"type": kind, "object": obj}).encode() + b"\n"
        for selector, queue in self._watches:
            if matches(selector, obj["metadata"].get("labels") or {}):
                queue.put_nowait(line)

    async def __call__(self, *args: Any, **kwargs: Any) -> _Response:
        selector = kwargs.get("label_selector")
        if kwargs.get("watch"):
            self.selectors.append(("watch", selector))
            queue: asyncio.Queue[bytes] = asyncio.Queue()
            self._watches.append((selector, queue))
            return _Response(queue=queue)
        self.selectors.append(("list", selector))
        items = [
            o for o in self.objects.values() if matches(selector, o["metadata"].get("labels") or {})
        ]
        return _Response({"metadata": {"resourceVersion": str(self.version)}, "items": items})
