"""Writes to the cluster, and the one read that is not cached (Secrets, which we may only
``get``). Each method does one API call and maps API errors to outcomes callers can act on."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import uuid
from typing import Any

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.api import constants
from gitea_runner_operator.reconcile.status import Problem

log = structlog.get_logger(__name__)

MERGE_PATCH = "application/merge-patch+json"
COMPONENT = "gitea-runner-operator"


class SecretProblem(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


class Cluster:
    def __init__(self, api: client.ApiClient, identity: str = COMPONENT) -> None:
        # Typed as Any: the generated stubs omit the documented ``_content_type`` and
        # ``_preload_content`` keywords and insist on model objects where dicts are accepted.
        self._core: Any = client.CoreV1Api(api)
        self._batch: Any = client.BatchV1Api(api)
        self._custom: Any = client.CustomObjectsApi(api)
        self._identity = identity

    async def create_job(self, manifest: dict[str, Any]) -> str:
        namespace = manifest["metadata"]["namespace"]
        resp = await self._batch.create_namespaced_job(namespace, manifest, _preload_content=False)
        try:
            body = await resp.json()
        finally:
            resp.release()
        return str(body["metadata"]["name"])

    async def delete_job(self, namespace: str, name: str) -> bool:
        """Delete a runner Job and its Pods; False if it was already gone."""
        try:
            await self._batch.delete_namespaced_job(
                name, namespace, propagation_policy="Background", _preload_content=False
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def annotate_job(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        try:
            await self._batch.patch_namespaced_job(
                name,
                namespace,
                {"metadata": {"annotations": annotations}},
                _content_type=MERGE_PATCH,
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    async def patch_group_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        await self._custom.patch_namespaced_custom_object_status(
            constants.GROUP,
            constants.VERSION,
            namespace,
            constants.PLURAL,
            name,
            {"status": status},
            _content_type=MERGE_PATCH,
            _preload_content=False,
        )

    async def read_secret_key(self, namespace: str, name: str, key: str, field: str) -> str:
        """Return one decoded Secret value. ``field`` (e.g. ``spec.authToken``) goes into the
        error so a user knows which reference to fix. The value itself is never logged."""
        try:
            secret = await self._core.read_namespaced_secret(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                raise SecretProblem(
                    Problem(
                        "SecretNotFound",
                        f"{field}.secretRef: Secret {namespace}/{name} not found",
                    )
                ) from None
            if exc.status == 403:
                raise SecretProblem(
                    Problem(
                        "SecretForbidden",
                        f"{field}.secretRef: the operator may not read Secret {namespace}/{name};"
                        " bind the ClusterRole gitea-runner-operator-secrets in this namespace",
                    )
                ) from None
            raise
        data = secret.data or {}
        if key not in data:
            raise SecretProblem(
                Problem(
                    "SecretKeyMissing",
                    f"{field}.secretRef: Secret {namespace}/{name} has no key {key!r}",
                )
            )
        try:
            value = base64.b64decode(data[key], validate=True).decode().strip()
        except (binascii.Error, UnicodeDecodeError):
            value = ""
        if not value:
            raise SecretProblem(
                Problem(
                    "SecretKeyMissing",
                    f"{field}.secretRef: key {key!r} of Secret {namespace}/{name} is empty",
                )
            )
        return value

    async def emit_event(
        self, group: dict[str, Any], event_type: str, reason: str, message: str
    ) -> None:
        """Best effort: an Event that cannot be written must not fail a reconcile."""
        meta = group["metadata"]
        now = dt.datetime.now(dt.UTC)
        event = {
            "metadata": {
                "name": f"{meta['name']}.{uuid.uuid4().hex[:16]}",
                "namespace": meta["namespace"],
            },
            "involvedObject": {
                "apiVersion": constants.API_VERSION,
                "kind": constants.KIND,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self._identity,
            "firstTimestamp": now.isoformat(),
            "lastTimestamp": now.isoformat(),
            "count": 1,
        }
        try:
            await self._core.create_namespaced_event(
                meta["namespace"], event, _preload_content=False
            )
        except ApiException as exc:
            log.warning("could not write event", reason=reason, status=exc.status)
