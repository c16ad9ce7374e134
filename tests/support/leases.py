"""An in-memory Lease API with the API server's compare-and-swap (resourceVersion) and
delete preconditions, and a clock to move by hand: for the membership and leadership tests.
Safe to share between threads (the leader Lease is kept from a thread of its own): every
call takes one lock, and every write is logged with its time and holder."""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import threading
import time
from collections.abc import Callable, Coroutine
from types import SimpleNamespace
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException


def _locked(
    call: Callable[..., Coroutine[Any, Any, Any]],
) -> Callable[..., Coroutine[Any, Any, Any]]:
    @functools.wraps(call)
    async def locked(self: FakeLeases, *args: Any, **kwargs: Any) -> Any:
        with self.lock:  # the methods never await: the lock is never held across a switch
            return await call(self, *args, **kwargs)

    return locked


class FakeLeases:
    """Just enough of CoordinationV1Api: read, create, replace, list, delete."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.versions = itertools.count(1)
        self.fail: Exception | None = None
        self.lock = threading.Lock()
        self.writes: list[tuple[float, str | None]] = []  # (time.monotonic(), holder)

    def holder(self, name: str) -> str | None:
        with self.lock:
            current = self.objects.get(name)
            return current["spec"].get("holderIdentity") if current else None

    def renewals(self, holder: str, start: float = 0.0, end: float = float("inf")) -> int:
        """Writes by ``holder`` between ``start`` and ``end`` (time.monotonic())."""
        with self.lock:
            return sum(1 for at, who in self.writes if who == holder and start <= at <= end)

    def _check(self) -> None:
        if self.fail is not None:
            raise self.fail

    def _store(self, body: dict[str, Any]) -> SimpleNamespace:
        body = {
            **body,
            "metadata": {**body["metadata"], "resourceVersion": str(next(self.versions))},
        }
        self.objects[body["metadata"]["name"]] = body
        self.writes.append((time.monotonic(), body["spec"].get("holderIdentity")))
        return _view(body)

    @_locked
    async def read_namespaced_lease(self, name: str, namespace: str, **_: Any) -> Any:
        self._check()
        if name not in self.objects:
            raise ApiException(status=404)
        return _view(self.objects[name])

    @_locked
    async def create_namespaced_lease(self, namespace: str, body: dict[str, Any], **_: Any) -> Any:
        self._check()
        if body["metadata"]["name"] in self.objects:
            raise ApiException(status=409)
        return self._store(body)

    @_locked
    async def replace_namespaced_lease(
        self, name: str, namespace: str, body: dict[str, Any], **_: Any
    ) -> Any:
        self._check()
        current = self.objects.get(name)
        if current is None:
            raise ApiException(status=404)
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise ApiException(status=409)
        return self._store(body)

    @_locked
    async def list_namespaced_lease(self, namespace: str, label_selector: str, **_: Any) -> Any:
        self._check()
        key, _, value = label_selector.partition("=")
        items = [
            _view(o) for o in self.objects.values() if o["metadata"]["labels"].get(key) == value
        ]
        return SimpleNamespace(items=items)

    @_locked
    async def delete_namespaced_lease(self, name: str, namespace: str, body: Any, **_: Any) -> None:
        self._check()
        current = self.objects.get(name)
        if current is None:
            raise ApiException(status=404)
        if body.preconditions.resource_version != current["metadata"]["resourceVersion"]:
            raise ApiException(status=409)
        del self.objects[name]

    def steal(self, name: str) -> None:
        """Someone else writes the Lease (a new resourceVersion)."""
        self._store(self.objects[name])


def _view(body: dict[str, Any]) -> SimpleNamespace:
    m, s = body["metadata"], body["spec"]
    return SimpleNamespace(
        metadata=SimpleNamespace(
            name=m["name"], resource_version=m["resourceVersion"], annotations=m.get("annotations")
        ),
        spec=SimpleNamespace(
            holder_identity=s.get("holderIdentity"),
            renew_time=s.get("renewTime"),
            acquire_time=_time(s.get("acquireTime")),
            lease_duration_seconds=s.get("leaseDurationSeconds"),
            lease_transitions=s.get("leaseTransitions"),
        ),
    )


def _time(value: str | None) -> dt.datetime | None:
    """A MicroTime as the client hands it over (a datetime)."""
    return dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ") if value else None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class NoRunnerObjects:
    """The namespaced Job and Pod listings a sharded cache fetches a taken group with
    (ClusterCache.serve), answering that the group has none yet; and its listing of the
    namespace's RunnerGroups (read whole again), answering none: what the test put in the
    cache stays as it is."""

    async def list_namespaced_job(self, *args: Any, **kwargs: Any) -> Any:
        from tests.support.api_response import FakeResponse

        return FakeResponse(200, b'{"items": []}')

    list_namespaced_pod = list_namespaced_job
    list_namespaced_custom_object = list_namespaced_job


def without_runner_objects(cache: Any) -> None:
    """A sharded ClusterCache whose fetches of taken groups find nothing (no API server)."""
    none = NoRunnerObjects()
    cache._custom = none
    cache.share._listers = {"jobs": none.list_namespaced_job, "pods": none.list_namespaced_pod}
