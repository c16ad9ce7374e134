"""An in-memory Lease API with the API server's compare-and-swap (resourceVersion) and
delete preconditions, and a clock to move by hand: for the membership tests."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException


class FakeLeases:
    """Just enough of CoordinationV1Api: read, create, replace, list, delete."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.versions = itertools.count(1)
        self.fail: Exception | None = None

    def _check(self) -> None:
        if self.fail is not None:
            raise self.fail

    def _store(self, body: dict[str, Any]) -> SimpleNamespace:
        body = {
            **body,
            "metadata": {**body["metadata"], "resourceVersion": str(next(self.versions))},
        }
        self.objects[body["metadata"]["name"]] = body
        return _view(body)

    async def read_namespaced_lease(self, name: str, namespace: str, **_: Any) -> Any:
        self._check()
        if name not in self.objects:
            raise ApiException(status=404)
        return _view(self.objects[name])

    async def create_namespaced_lease(self, namespace: str, body: dict[str, Any], **_: Any) -> Any:
        self._check()
        if body["metadata"]["name"] in self.objects:
            raise ApiException(status=409)
        return self._store(body)

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

    async def list_namespaced_lease(self, namespace: str, label_selector: str, **_: Any) -> Any:
        self._check()
        key, _, value = label_selector.partition("=")
        items = [
            _view(o) for o in self.objects.values() if o["metadata"]["labels"].get(key) == value
        ]
        return SimpleNamespace(items=items)

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
            lease_duration_seconds=s.get("leaseDurationSeconds"),
        ),
    )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now
