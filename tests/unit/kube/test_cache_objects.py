"""The calls that write and delete cache objects carry what the operator read as a
precondition, so an object replaced in between is refused by the API server, never taken
over or deleted."""

from __future__ import annotations

import json
import re
from typing import Any

from aioresponses import aioresponses
from kubernetes_asyncio import client

from gitea_runner_operator.kube.cache_objects import CacheObjects

HOST = "http://kube.test"
SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "ci-cache", "namespace": "team-a"},
    "spec": {"type": "ClusterIP"},
}


def sent(mock: aioresponses, method: str) -> list[tuple[str, Any]]:
    return [
        (str(url), json.loads(call.kwargs["data"]) if call.kwargs.get("data") else None)
        for (verb, url), calls in mock.requests.items()
        if verb == method
        for call in calls
    ]


async def test_applies_force_only_over_what_was_read_and_deletes_go_by_uid():
    config = client.Configuration(host=HOST)
    async with client.ApiClient(config) as api:
        objects = CacheObjects(api)
        path = re.compile(rf"^{HOST}/api/v1/namespaces/team-a/services/ci-cache.*$")
        with aioresponses() as mock:
            mock.patch(path, payload={}, repeat=True)
            mock.delete(path, payload={}, repeat=True)
            await objects.apply(SERVICE, resource_version=None)
            await objects.apply(SERVICE, resource_version="42")
            assert await objects.delete("Service", "team-a", "ci-cache", "uid-1") is True
            patches, deletes = sent(mock, "PATCH"), sent(mock, "DELETE")
    (absent_url, absent), (owned_url, owned) = patches
    assert "force=false" in absent_url.lower() and "resourceVersion" not in absent["metadata"]
    assert "force=true" in owned_url.lower() and owned["metadata"]["resourceVersion"] == "42"
    assert "resourceVersion" not in SERVICE["metadata"]  # the caller's manifest is untouched
    ((_, options),) = deletes
    assert options["preconditions"] == {"uid": "uid-1"}
    assert options["propagationPolicy"] == "Background"


async def test_a_delete_refused_by_its_precondition_reports_the_object_not_deleted():
    config = client.Configuration(host=HOST)
    async with client.ApiClient(config) as api:
        objects = CacheObjects(api)
        url = f"{HOST}/api/v1/namespaces/team-a/persistentvolumeclaims/ci-cache"
        with aioresponses() as mock:
            mock.delete(url, status=409, payload={"reason": "Conflict"})
            gone = await objects.delete("PersistentVolumeClaim", "team-a", "ci-cache", "old")
    assert gone is False
