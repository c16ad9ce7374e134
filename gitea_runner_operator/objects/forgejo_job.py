"""Render the runner Job of a Forgejo group: ``forgejo-runner one-job`` with its own
credentials, bound to one job by its handle.

It is the Gitea runner Job (objects/job_template.py: the user's template, the mode's Docker
setup, CA bundle and config) with the runner container's Gitea parts replaced:

- the Job is created **suspended**: it has no credentials yet. The group's poll task
  registers a runner for it (``POST …/actions/runners``), writes the answer into a Secret
  named like the Job and owned by it, and only then lets the Job start (poll/enroll.py);
- the runner reads its uuid from that Secret by ``secretKeyRef`` and its token from the
  Secret mounted as a file (``--token-url file://…``): never a value in the Job spec;
- ``--handle`` (when the Secret names one) makes the runner take exactly that attempt of
  exactly that job, and ``--wait`` keeps it asking until it is handed out. A handle that no
  longer names a waiting job gives the runner nothing, forever: the operator then deletes
  the Job and the registration (reconcile/forgejo.py);
- ``dind-rootless`` without ``spec.image`` runs as ``dind``: the Forgejo runner image has
  no Docker daemon of its own, so the daemon runs as the DinD sidecar.
"""

from __future__ import annotations

from typing import Any

from gitea_runner_operator.api import constants
from gitea_runner_operator.api.forge import FORGEJO_RUNNER_IMAGE
from gitea_runner_operator.api.pod_template import REGISTER_CONTAINER, RUNNER_CONTAINER
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec, RunnerMode
from gitea_runner_operator.objects.job_template import OPERATOR_DIR, render_runner_job

CREDENTIALS_DIR = f"{OPERATOR_DIR}/runner"
TOKEN_FILE = f"{CREDENTIALS_DIR}/token"
CREDENTIALS_VOLUME = "gro-runner-credentials"
FORGE_ANNOTATION = f"{constants.GROUP}/forge"
HANDLE_ANNOTATION = f"{constants.GROUP}/job-handle"
RUNNER_ID_ANNOTATION = f"{constants.GROUP}/runner-id"
# Keys of the runner's Secret.
UUID_KEY, TOKEN_KEY, HANDLE_KEY = "uuid", "token", "handle"

# Labels become repeated --label flags; the handle is passed only when there is one (an
# attempt created before Forgejo 15 has none: then one-job takes any job its labels fit).
ONE_JOB_SCRIPT = """\
set -eu
set --
old_ifs=$IFS; IFS=,
for label in $FORGEJO_RUNNER_LABELS; do set -- "$@" --label "$label"; done
IFS=$old_ifs
if [ -n "${FORGEJO_RUNNER_HANDLE:-}" ]; then set -- "$@" --handle "$FORGEJO_RUNNER_HANDLE"; fi
if [ -n "${CONFIG_FILE:-}" ]; then set -- "$@" --config "$CONFIG_FILE"; fi
exec forgejo-runner one-job --url "$FORGEJO_URL" --uuid "$FORGEJO_RUNNER_UUID" \\
  --token-url "file://$FORGEJO_RUNNER_TOKEN_FILE" --wait "$@"
"""

# Env the act_runner image's entrypoint reads; meaningless to forgejo-runner.
_GITEA_ENV = frozenset(
    {
        "GITEA_INSTANCE_URL",
        "GITEA_RUNNER_REGISTRATION_TOKEN",
        "GITEA_RUNNER_EPHEMERAL",
        "GITEA_RUNNER_LABELS",
        "GITEA_RUNNER_NAME",
    }
)


def forgejo_spec(spec: RunnerGroupSpec) -> RunnerGroupSpec:
    """The spec as a Forgejo runner Pod is rendered from (see the module docstring)."""
    if spec.mode is RunnerMode.DIND_ROOTLESS and spec.image is None:
        return spec.model_copy(update={"mode": RunnerMode.DIND})
    return spec


def runner_env(spec: RunnerGroupSpec, labels: str, job_name: str) -> list[dict[str, Any]]:
    def from_secret(name: str, key: str, optional: bool = False) -> dict[str, Any]:
        ref: dict[str, Any] = {"name": job_name, "key": key}
        if optional:
            ref["optional"] = True
        return {"name": name, "valueFrom": {"secretKeyRef": ref}}

    return [
        {"name": "FORGEJO_URL", "value": spec.gitea.url},
        from_secret("FORGEJO_RUNNER_UUID", UUID_KEY),
        from_secret("FORGEJO_RUNNER_HANDLE", HANDLE_KEY, optional=True),
        {"name": "FORGEJO_RUNNER_TOKEN_FILE", "value": TOKEN_FILE},
        {"name": "FORGEJO_RUNNER_LABELS", "value": labels},
    ]


def render_forgejo_job(
    *,
    group_name: str,
    namespace: str,
    group_uid: str,
    spec: RunnerGroupSpec,
    job_name: str,
    ttl_seconds_after_finished: int,
    shard: str | None = None,
) -> dict[str, Any]:
    effective = forgejo_spec(spec)
    manifest = render_runner_job(
        group_name=group_name,
        namespace=namespace,
        group_uid=group_uid,
        spec=effective,
        job_name=job_name,
        ttl_seconds_after_finished=ttl_seconds_after_finished,
        shard=shard,
    )
    meta = manifest["metadata"]
    meta["annotations"][FORGE_ANNOTATION] = "forgejo"
    labels = meta["annotations"][constants.RUNNER_LABELS_ANNOTATION]
    manifest["spec"]["suspend"] = True  # until its credentials exist (poll/enroll.py)
    pod = manifest["spec"]["template"]["spec"]
    # A Forgejo group that still names a registration token must not get Gitea's host-mode
    # registration step: its runner is registered through the API.
    init = [c for c in pod.get("initContainers", []) if c["name"] != REGISTER_CONTAINER]
    if init:
        pod["initContainers"] = init
    else:
        pod.pop("initContainers", None)
    runner = next(c for c in pod["containers"] if c["name"] == RUNNER_CONTAINER)
    if spec.image is None:
        runner["image"] = FORGEJO_RUNNER_IMAGE
    runner["command"] = ["/bin/sh", "-c", ONE_JOB_SCRIPT]
    runner.pop("args", None)
    kept = [e for e in runner.get("env", []) if e.get("name") not in _GITEA_ENV]
    runner["env"] = runner_env(effective, labels, job_name) + kept
    runner.setdefault("volumeMounts", []).append(
        {"name": CREDENTIALS_VOLUME, "mountPath": CREDENTIALS_DIR, "readOnly": True}
    )
    pod["volumes"].append(
        {
            "name": CREDENTIALS_VOLUME,
            "secret": {
                "secretName": job_name,
                "items": [{"key": TOKEN_KEY, "path": "token"}],
                "defaultMode": 0o440,  # the group: fsGroup, for non-root runners
            },
        }
    )
    return manifest
