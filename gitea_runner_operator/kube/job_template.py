"""Render the batch/v1 Job that runs one ephemeral runner.

Pure: RunnerGroup in, manifest dict out. Secrets are referenced by ``secretKeyRef`` and never
copied into the Job, so nothing that can read Jobs can read a token.
"""

from __future__ import annotations

from typing import Any

from gitea_runner_operator.api import constants
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec

TTL_SECONDS_AFTER_FINISHED = 600
BACKOFF_LIMIT = 2
RUNNER_CONTAINER = "runner"
ROOTLESS_UID = 1000


def group_labels(group_name: str) -> dict[str, str]:
    """Labels on every Job and Pod of a group; the informers select on them."""
    return {
        constants.APP_LABEL: group_name,
        constants.MANAGED_BY_LABEL: constants.MANAGED_BY_VALUE,
        constants.GROUP_NAME_LABEL: group_name,
    }


def owner_reference(group_name: str, group_uid: str) -> dict[str, Any]:
    return {
        "apiVersion": constants.API_VERSION,
        "kind": constants.KIND,
        "name": group_name,
        "uid": group_uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def runner_env(spec: RunnerGroupSpec) -> list[dict[str, Any]]:
    """Environment read by the act_runner image's entrypoint (scripts/run.sh)."""
    token = spec.registration_token.secret_ref
    return [
        {"name": "GITEA_INSTANCE_URL", "value": spec.gitea.url},
        {
            "name": "GITEA_RUNNER_REGISTRATION_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}},
        },
        # Any non-empty value turns ephemeral mode on; "true" says what we mean.
        {"name": "GITEA_RUNNER_EPHEMERAL", "value": "true"},
        {"name": "GITEA_RUNNER_LABELS", "value": ",".join(spec.labels)},
        # The runner registers under its Pod's name, so Gitea's runner list maps onto Pods.
        {
            "name": "GITEA_RUNNER_NAME",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
        },
        # The rootless DinD image runs its own dockerd with TLS on localhost.
        {"name": "DOCKER_HOST", "value": "tcp://localhost:2376"},
        {"name": "DOCKER_TLS_VERIFY", "value": "1"},
        {"name": "DOCKER_CERT_PATH", "value": "/certs/client"},
    ]


def render_runner_job(
    *,
    group_name: str,
    namespace: str,
    group_uid: str,
    spec: RunnerGroupSpec,
    job_name: str,
    ttl_seconds_after_finished: int = TTL_SECONDS_AFTER_FINISHED,
) -> dict[str, Any]:
    """``job_name`` comes from :func:`~gitea_runner_operator.api.naming.new_job_name`: it
    carries the group's UID hash, which is what proves a registration is this group's."""
    labels = group_labels(group_name)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {constants.RUNNER_LABELS_ANNOTATION: ",".join(spec.labels)},
            "ownerReferences": [owner_reference(group_name, group_uid)],
        },
        "spec": {
            "ttlSecondsAfterFinished": ttl_seconds_after_finished,
            "backoffLimit": BACKOFF_LIMIT,
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "restartPolicy": "OnFailure",
                    # A runner needs no Kubernetes API; do not hand it a credential.
                    "automountServiceAccountToken": False,
                    "securityContext": {"fsGroup": ROOTLESS_UID},
                    "containers": [
                        {
                            "name": RUNNER_CONTAINER,
                            "image": spec.image,
                            # The DinD image needs it for its nested container runtime.
                            "securityContext": {"privileged": True},
                            "env": runner_env(spec),
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                        }
                    ],
                    # Each runner has its own registration file (/data/.runner); a shared
                    # volume would make parallel ephemeral runners overwrite each other.
                    "volumes": [{"name": "data", "emptyDir": {}}],
                },
            },
        },
    }
