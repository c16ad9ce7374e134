"""Each Forgejo runner's own credentials, in a Secret owned by its runner Job.

The Secret is named like the Job and carries an ownerReference to it, so the garbage
collector deletes it with the Job (when the group goes, when the Job is reaped, or when the
Job's TTL after finishing runs out). The operator only ever *creates* these Secrets (RBAC
``create`` on secrets): it cannot read, list or update them afterwards, and the token exists
nowhere else but in Forgejo (as a salted hash) and in the runner's Pod.
"""

from __future__ import annotations

import base64
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.api import constants
from gitea_runner_operator.kube.http import create, merge_patch_unless_gone
from gitea_runner_operator.kube.ratelimit import TokenBucket


class SecretExists(Exception):
    """A Secret of that name exists already: its content is unknown (and unreadable)."""


def credentials_secret(
    namespace: str, job: dict[str, Any], data: dict[str, str], group_name: str
) -> dict[str, Any]:
    """The Secret manifest. Pure, for tests; ``data`` holds the values (base64 here)."""
    meta = job["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": meta["name"],
            "namespace": namespace,
            "labels": {
                constants.MANAGED_BY_LABEL: constants.MANAGED_BY_VALUE,
                constants.GROUP_NAME_LABEL: group_name,
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": meta["uid"],
                }
            ],
        },
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


class RunnerCredentials:
    def __init__(self, api: client.ApiClient, limiter: TokenBucket | None = None) -> None:
        self._core: Any = client.CoreV1Api(api)
        self._batch: Any = client.BatchV1Api(api)
        self._limiter = limiter or TokenBucket(qps=50, burst=100)

    async def create_secret(self, manifest: dict[str, Any]) -> None:
        """Create the Secret through the one write path (a 429 is waited out and tried
        again, like every write); :class:`SecretExists` when the name is taken."""
        namespace = manifest["metadata"]["namespace"]
        try:
            await create(self._limiter, namespace, self._core.create_namespaced_secret, manifest)
        except ApiException as exc:
            if exc.status == 409:
                raise SecretExists(manifest["metadata"]["name"]) from None
            raise

    async def resume_job(self, namespace: str, name: str) -> bool:
        """Let a suspended runner Job start its Pod; False when the Job is gone."""
        return await merge_patch_unless_gone(
            self._limiter,
            namespace,
            self._batch.patch_namespaced_job,
            name,
            namespace,
            {"spec": {"suspend": False}},
        )
