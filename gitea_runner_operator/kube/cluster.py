"""Writes to the cluster. Each method does one API call, with a timeout, and maps API errors
to outcomes callers can act on. (Secrets, the one uncached read, live in ``secrets.py``.)"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.api import constants
from gitea_runner_operator.kube.events import EventRecorder
from gitea_runner_operator.kube.http import (
    REQUEST_TIMEOUT,
    Throttled,
    create,
    merge_patch_unless_gone,
    write_unless_gone,
)
from gitea_runner_operator.kube.ratelimit import TokenBucket

log = structlog.get_logger(__name__)

COMPONENT = "gitea-runner-operator"
# Seconds for any single read or write; a hung API server must not hang a worker.
TIMEOUT = REQUEST_TIMEOUT


class CreateRefused(Exception):
    """The API server refused a runner Job (quota, admission, validation). ``str(self)``
    is the API server's own message, which names the rule or field at fault."""


def api_message(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or f"HTTP {exc.status} {exc.reason}")[:500]


class Cluster:
    def __init__(
        self,
        api: client.ApiClient,
        identity: str = COMPONENT,
        limiter: TokenBucket | None = None,
    ) -> None:
        self._limiter = limiter or TokenBucket(qps=50, burst=100)
        # Typed as Any: the generated stubs omit the documented ``_content_type`` and
        # ``_preload_content`` keywords and insist on model objects where dicts are accepted.
        self._core: Any = client.CoreV1Api(api)
        self._batch: Any = client.BatchV1Api(api)
        self._custom: Any = client.CustomObjectsApi(api)
        self._identity = identity
        self.events = EventRecorder(self._create_event, self._patch_event)

    @property
    def limiter(self) -> TokenBucket:
        """The one write budget; other writers of the operator's objects share it."""
        return self._limiter

    async def create_job(self, manifest: dict[str, Any]) -> str:
        namespace = manifest["metadata"]["namespace"]
        try:
            body = await create(
                self._limiter,
                namespace,
                self._batch.create_namespaced_job,
                manifest,
                urgent=True,  # creates go before the writes that only report
            )
        except ApiException as exc:
            if exc.status in (400, 403, 422):
                raise CreateRefused(api_message(exc)) from None
            if exc.status == 409:  # AlreadyExists: an earlier attempt did create it
                return str(manifest["metadata"]["name"])
            raise
        return str(body["metadata"]["name"])

    async def delete_job(self, namespace: str, name: str) -> bool:
        """Delete a runner Job and its Pods; False if it was already gone."""
        return await write_unless_gone(
            self._limiter,
            namespace,
            lambda: self._batch.delete_namespaced_job(
                name,
                namespace,
                propagation_policy="Background",
                _preload_content=False,
                _request_timeout=TIMEOUT,
            ),
        )

    async def annotate_job(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        await self._annotate(self._batch.patch_namespaced_job, namespace, name, annotations)

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        await self._annotate(self._core.patch_namespaced_pod, namespace, name, annotations)

    async def _annotate(
        self, patch: Any, namespace: str, name: str, annotations: dict[str, str]
    ) -> None:
        """Merge annotations into one object; one that is gone already needs none."""
        await merge_patch_unless_gone(
            self._limiter,
            namespace,
            patch,
            name,
            namespace,
            {"metadata": {"annotations": annotations}},
        )

    async def patch_group_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        await self._patch_group(namespace, name, {"status": status}, subresource=True)

    async def set_finalizers(
        self, namespace: str, name: str, finalizers: list[str], resource_version: str
    ) -> None:
        """Replace the group's finalizers, only if it has not changed since we read it (the
        resourceVersion makes this a compare-and-swap; a 409 means read again)."""
        meta: dict[str, Any] = {"finalizers": finalizers}
        if resource_version:
            meta["resourceVersion"] = resource_version
        await self._patch_group(namespace, name, {"metadata": meta})

    async def _patch_group(
        self, namespace: str, name: str, body: dict[str, Any], *, subresource: bool = False
    ) -> None:
        """Merge-patch a RunnerGroup (``subresource``: its status). One deleted meanwhile
        needs neither a report nor a release."""
        patch = (
            self._custom.patch_namespaced_custom_object_status
            if subresource
            else self._custom.patch_namespaced_custom_object
        )
        await merge_patch_unless_gone(
            self._limiter,
            namespace,
            patch,
            constants.GROUP,
            constants.VERSION,
            namespace,
            constants.PLURAL,
            name,
            body,
        )

    async def emit_event(
        self, group: dict[str, Any], event_type: str, reason: str, message: str
    ) -> None:
        """Best effort: an Event that cannot be written must not fail a reconcile. Repeats
        of the same type and reason for the group are aggregated (kube/events.py)."""
        meta = group["metadata"]
        event = {
            "metadata": {"namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": constants.API_VERSION,
                "kind": constants.KIND,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": event_type,
            "reason": reason,
            "message": message,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self._identity,
        }
        await self.events.record(event)

    async def _create_event(self, namespace: str, event: dict[str, Any]) -> bool:
        try:
            await create(self._limiter, namespace, self._core.create_namespaced_event, event)
        except (ApiException, Throttled, TimeoutError, aiohttp.ClientError) as exc:
            log.warning("could not write event", reason=event["reason"], error=type(exc).__name__)
            return False
        return True

    async def _patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> bool:
        try:
            return await merge_patch_unless_gone(
                self._limiter, namespace, self._core.patch_namespaced_event, name, namespace, patch
            )
        except (ApiException, Throttled, TimeoutError, aiohttp.ClientError) as exc:
            log.warning("could not update event", event_name=name, error=type(exc).__name__)
            return False
