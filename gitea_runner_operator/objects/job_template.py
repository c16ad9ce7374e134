"""Render the batch/v1 Job that runs one ephemeral runner.

Pure: RunnerGroup in, manifest dict out. Secrets are referenced by ``secretKeyRef`` or a Secret
volume and never copied into the Job, so nothing that can read Jobs can read a token.

The runner Pod is the user's ``spec.template`` with the operator's parts laid over it: the
fields the operator owns (see api/pod_template.py) always come from the operator, the mode's
defaults (security context, Docker env, volumes) apply only where the template says nothing,
and every other template field passes through unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from gitea_runner_operator.api import constants
from gitea_runner_operator.api.cache import uses_cache
from gitea_runner_operator.api.naming import owner_reference
from gitea_runner_operator.api.pod_template import REGISTER_CONTAINER, RUNNER_CONTAINER
from gitea_runner_operator.api.runner_config import registers_in_init
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec, RunnerMode
from gitea_runner_operator.api.shard import lone_shard
from gitea_runner_operator.objects import config_handoff, userns
from gitea_runner_operator.objects.jobcache_server import runner_config_volume
from gitea_runner_operator.objects.security import restricted_container_security

TTL_SECONDS_AFTER_FINISHED = 600
BACKOFF_LIMIT = 2
DIND_CONTAINER = "dind"
ROOTLESS_UID = 1000
HOST_UID = 1000

# Where the operator mounts what it hands the runner; outside /data so a template volume on
# /data (e.g. a bigger ephemeral volume) cannot hide them.
OPERATOR_DIR = "/etc/gitea-runner-operator"
CA_DIR = f"{OPERATOR_DIR}/ca"
CA_FILE = f"{CA_DIR}/ca.crt"
CONFIG_DIR = f"{OPERATOR_DIR}/config"
CONFIG_FILE = f"{CONFIG_DIR}/config.yaml"
DOCKER_CERTS_DIR = "/certs"


def group_labels(group_name: str, shard: str) -> dict[str, str]:
    """Labels on every Job and Pod of a group; the informers select on them (under
    --sharding, on the shard too: kube/cache.py)."""
    return {
        constants.APP_LABEL: group_name,
        constants.MANAGED_BY_LABEL: constants.MANAGED_BY_VALUE,
        constants.GROUP_NAME_LABEL: group_name,
        constants.SHARD_LABEL: shard,
    }


def rendered_labels(spec: RunnerGroupSpec) -> list[str]:
    """The labels the runner registers with. In host mode there is no Docker to run a
    ``docker://`` image in, so every label runs on the host: ``name:host``."""
    if spec.mode is RunnerMode.HOST:
        return [f"{label.name}:host" for label in spec.runner_labels]
    return list(spec.labels)


def runner_env(spec: RunnerGroupSpec) -> list[dict[str, Any]]:
    """Environment read by the runner image's entrypoint (the official image documents them).

    The Gitea part is owned (a template may not set it); the rest are the mode's defaults,
    which a template's env entry of the same name replaces.
    """
    # No registration token, in any mode: the ``gro-register`` init container registers, and
    # the runner container starts with the registration file only (see _register_container).
    env: list[dict[str, Any]] = [{"name": "GITEA_INSTANCE_URL", "value": spec.gitea.url}]
    env += [
        # Any non-empty value turns ephemeral mode on; "true" says what we mean.
        {"name": "GITEA_RUNNER_EPHEMERAL", "value": "true"},
        {"name": "GITEA_RUNNER_LABELS", "value": ",".join(rendered_labels(spec))},
        # The runner registers under its Pod's name, so Gitea's runner list maps onto Pods.
        {
            "name": "GITEA_RUNNER_NAME",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
        },
    ]
    if spec.mode in (RunnerMode.HOST, RunnerMode.DIND_USERNS):
        # No passwd entry for the non-root user: give the runner a writable home for its cache.
        env.append({"name": "HOME", "value": "/data"})
    if spec.mode is RunnerMode.DIND_USERNS:
        env += userns.runner_env()  # the sidecar's socket: no port, no certificates
    elif spec.mode is not RunnerMode.HOST:
        # dind-rootless: the image's own dockerd; dind: the sidecar. Both TLS on localhost.
        env += [
            {"name": "DOCKER_HOST", "value": "tcp://localhost:2376"},
            {"name": "DOCKER_TLS_VERIFY", "value": "1"},
            {"name": "DOCKER_CERT_PATH", "value": f"{DOCKER_CERTS_DIR}/client"},
        ]
    if spec.gitea.ca_bundle is not None:
        env.append({"name": "SSL_CERT_FILE", "value": CA_FILE})
    if spec.runner_config is not None or uses_cache(spec.cache):
        env.append({"name": "CONFIG_FILE", "value": CONFIG_FILE})
    if uses_cache(spec.cache):
        env.append(config_handoff.runner_path([]))
    return env


def _token_env(spec: RunnerGroupSpec) -> dict[str, Any]:
    if spec.registration_token is None:  # the observer refuses such a Gitea group first
        raise ValueError("spec.registrationToken is required for a Gitea runner")
    token = spec.registration_token.secret_ref
    return {
        "name": "GITEA_RUNNER_REGISTRATION_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}},
    }


# What the runner image's entrypoint does before ``gitea-runner daemon``, on its own: it
# writes /data/.runner, after which the entrypoint skips registration and needs no token.
# The binary was renamed gitea-runner in the runner's 1.x images.
REGISTER_SCRIPT = """\
set -eu
[ -s .runner ] && exit 0  # registered already: the init container ran again in a new sandbox
bin=$(command -v act_runner || command -v gitea-runner)
exec "$bin" register --no-interactive --ephemeral \\
  --instance "$GITEA_INSTANCE_URL" --token "$GITEA_RUNNER_REGISTRATION_TOKEN" \\
  --name "$GITEA_RUNNER_NAME" --labels "$GITEA_RUNNER_LABELS" \\
  ${CONFIG_FILE:+--config "$CONFIG_FILE"}
"""

# Fields of the runner container an init container must not carry.
_NOT_FOR_INIT = frozenset(
    {"command", "args", "ports", "lifecycle", "restartPolicy", "resizePolicy"}
    | {"livenessProbe", "readinessProbe", "startupProbe"}
)


def _register_container(runner: dict[str, Any], spec: RunnerGroupSpec) -> dict[str, Any]:
    """The registration step of every mode, run to completion before the runner container
    (and, in ``dind-rootless``, the Docker daemon jobs drive) starts, so that no job can ever
    read the registration token (which registers any number of runners, of any labels). It
    is the runner container as the template made it (image, env such as a proxy, CA and config
    mounts, resources for a quota, security context), with the token added and the image's
    registration as its command. What stays behind is ``/data/.runner``: this one ephemeral
    runner's own credential, good for the one job it takes."""
    register = {k: copy.deepcopy(v) for k, v in runner.items() if k not in _NOT_FOR_INIT}
    register["name"] = REGISTER_CONTAINER
    register["command"] = ["/bin/sh", "-c", REGISTER_SCRIPT]
    register["workingDir"] = "/data"
    register["env"] = [*register.get("env", []), _token_env(spec)]
    return register


def _runner_container(spec: RunnerGroupSpec) -> dict[str, Any]:
    mounts: list[dict[str, Any]] = [{"name": "data", "mountPath": "/data"}]
    security: dict[str, Any]
    if spec.mode is RunnerMode.DIND_ROOTLESS:
        # The rootless DinD image needs it for its nested container runtime.
        security = {"privileged": True}
    elif spec.mode is RunnerMode.DIND:
        security = {}
        mounts.append({"name": "gro-docker-certs", "mountPath": DOCKER_CERTS_DIR, "readOnly": True})
    else:
        # host, and dind-userns (whose daemon is the sidecar's): what ``restricted`` asks.
        security = restricted_container_security(HOST_UID)
    if spec.mode is RunnerMode.DIND_USERNS:
        mounts.append(userns.runner_mount())
    if spec.gitea.ca_bundle is not None:
        mounts.append({"name": "gro-ca-bundle", "mountPath": CA_DIR, "readOnly": True})
    if uses_cache(spec.cache):
        # Never the Secret itself: a FIFO that yields the config once (objects/config_handoff.py).
        mounts += config_handoff.runner_mounts(CONFIG_DIR)
    elif spec.runner_config is not None:
        mounts.append({"name": "gro-runner-config", "mountPath": CONFIG_DIR, "readOnly": True})
    container: dict[str, Any] = {
        "name": RUNNER_CONTAINER,
        "image": spec.runner_image,
        "env": runner_env(spec),
        "volumeMounts": mounts,
    }
    if security:
        container["securityContext"] = security
    return container


def _dind_sidecar() -> dict[str, Any]:
    """Docker-in-Docker as a native sidecar: it starts (and is ready) before the runner and
    is stopped once the runner exits, so the Pod still completes."""
    return {
        "name": DIND_CONTAINER,
        "image": constants.DIND_IMAGE,
        "restartPolicy": "Always",
        "securityContext": {"privileged": True},
        # The image's entrypoint writes CA, server and client certs here and serves TLS on 2376.
        "env": [{"name": "DOCKER_TLS_CERTDIR", "value": DOCKER_CERTS_DIR}],
        "volumeMounts": [
            {"name": "gro-docker-certs", "mountPath": DOCKER_CERTS_DIR},
            {"name": "gro-dind-storage", "mountPath": "/var/lib/docker"},
        ],
        # The runner starts only once dockerd answers (and so the client certs exist).
        "startupProbe": {
            "exec": {"command": ["docker", "info"]},
            "periodSeconds": 2,
            "failureThreshold": 90,
        },
    }


def _daemon_sidecars(spec: RunnerGroupSpec) -> list[dict[str, Any]]:
    if spec.mode is RunnerMode.DIND:
        return [_dind_sidecar()]
    if spec.mode is RunnerMode.DIND_USERNS:
        return [userns.daemon_sidecar()]
    return []


def _operator_volumes(spec: RunnerGroupSpec, group_name: str) -> list[dict[str, Any]]:
    # Each runner has its own registration file (/data/.runner); a shared volume would make
    # parallel ephemeral runners overwrite each other.
    volumes: list[dict[str, Any]] = [{"name": "data", "emptyDir": {}}]
    if spec.mode is RunnerMode.DIND:
        volumes += [
            {"name": "gro-docker-certs", "emptyDir": {}},
            {"name": "gro-dind-storage", "emptyDir": {}},
        ]
    if spec.mode is RunnerMode.DIND_USERNS:
        volumes += userns.volumes()
    bundle = spec.gitea.ca_bundle
    if bundle is not None:
        ref = bundle.ref
        items = [{"key": ref.key, "path": "ca.crt"}]
        source: dict[str, Any] = (
            {"configMap": {"name": ref.name, "items": items}}
            if bundle.config_map_key_ref is not None
            else {"secret": {"secretName": ref.name, "items": items}}
        )
        volumes.append({"name": "gro-ca-bundle", **source})
    if uses_cache(spec.cache):
        # The merged config carries the cache's secret: a Secret of the operator's, mounted
        # only into the init containers, and handed to the runner once.
        volumes += config_handoff.handoff_volumes(runner_config_volume(group_name))
    elif spec.runner_config is not None:
        cfg = spec.runner_config.config_map_key_ref
        volumes.append(
            {
                "name": "gro-runner-config",
                "configMap": {"name": cfg.name, "items": [{"key": cfg.key, "path": "config.yaml"}]},
            }
        )
    return volumes


def _pod_security(spec: RunnerGroupSpec) -> dict[str, Any]:
    if spec.mode is RunnerMode.HOST:
        return {
            "runAsNonRoot": True,
            "fsGroup": HOST_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
    if spec.mode is RunnerMode.DIND_ROOTLESS:
        return {"fsGroup": ROOTLESS_UID}
    if spec.mode is RunnerMode.DIND_USERNS:
        # every container of the Pod, the runner's included, is in the socket's group
        return {"fsGroup": userns.SOCKET_GID}
    return {}


def _merge_named(
    base: Iterable[dict[str, Any]], user: Iterable[dict[str, Any]] | None, *keys: str
) -> list[dict[str, Any]]:
    """Base entries first (minus any that a user entry replaces by one of ``keys``), then the
    user's entries in their order."""
    user_list = list(user or [])
    taken = {(key, entry.get(key)) for entry in user_list for key in keys}
    kept = [entry for entry in base if not any((key, entry.get(key)) in taken for key in keys)]
    return kept + user_list


def _merge_container(base: dict[str, Any], user: dict[str, Any] | None) -> dict[str, Any]:
    """The user's container over the operator's: the user's fields win, except that env and
    volume mounts are merged (by name, and by name or path) and securityContext key by key.
    Owned env never collides: the spec's validation refused a template that sets it."""
    if user is None:
        return base
    merged = {**base, **copy.deepcopy(user)}
    merged["env"] = _merge_named(base.get("env", []), user.get("env"), "name")
    mounts = _merge_named(base.get("volumeMounts", []), user.get("volumeMounts"), "mountPath")
    if mounts:
        merged["volumeMounts"] = mounts
    if "securityContext" in base and "securityContext" in user:
        merged["securityContext"] = {**base["securityContext"], **user["securityContext"]}
    return merged


def _merge_containers(
    base: list[dict[str, Any]], user: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """Operator containers merged with the user's of the same name; the rest of the user's
    kept in order. An operator container the user does not name goes first."""
    by_name = {c["name"]: c for c in base}
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for container in user or []:
        name = container["name"]
        out.append(_merge_container(by_name[name], container) if name in by_name else container)
        seen.add(name)
    missing = [c for c in base if c["name"] not in seen]
    return missing + out


def render_pod_template(spec: RunnerGroupSpec, labels: dict[str, str]) -> dict[str, Any]:
    """The runner Pod template: the user's template with the operator's parts laid over it."""
    template = copy.deepcopy(spec.template or {})
    user_meta = template.get("metadata") or {}
    user_spec: dict[str, Any] = template.get("spec") or {}

    pod: dict[str, Any] = dict(user_spec)
    pod["restartPolicy"] = "OnFailure"
    if spec.mode is RunnerMode.DIND_USERNS:
        # Owned in this mode (the spec's validation refused a template that says true). The
        # RuntimeClass gives the daemon /dev/net/tun; a template may name another one.
        pod["hostUsers"] = False
        pod.setdefault("runtimeClassName", constants.USERNS_RUNTIME_CLASS)
    # A runner needs no Kubernetes API; do not hand it a credential unless asked to.
    pod.setdefault("automountServiceAccountToken", False)
    security = {**_pod_security(spec), **(user_spec.get("securityContext") or {})}
    if security:
        pod["securityContext"] = security
    pod["containers"] = _merge_containers([_runner_container(spec)], user_spec.get("containers"))
    init = _daemon_sidecars(spec)
    init_containers = _merge_containers(init, user_spec.get("initContainers"))
    runner = next(c for c in pod["containers"] if c["name"] == RUNNER_CONTAINER)
    if registers_in_init(spec):
        # Last, so the user's init containers (and native sidecars such as a proxy) run first.
        register = _register_container(runner, spec)
        if uses_cache(spec.cache):
            register = config_handoff.with_secret_config(register, CONFIG_DIR)
        init_containers.append(register)
    if uses_cache(spec.cache):
        # After registration, so the runner container is the first to open the FIFO.
        init_containers.append(
            config_handoff.handoff_sidecar(runner["image"], runner.get("imagePullPolicy"))
        )
        env = runner.get("env", [])
        runner["env"] = [e for e in env if e.get("name") != "PATH"]
        runner["env"].append(config_handoff.runner_path(env))
    if init_containers:
        pod["initContainers"] = init_containers
    pod["volumes"] = _merge_named(
        _operator_volumes(spec, labels[constants.GROUP_NAME_LABEL]),
        user_spec.get("volumes"),
        "name",
    )
    lifetime = spec.max_runner_lifetime_seconds
    if lifetime is not None:
        pod["activeDeadlineSeconds"] = lifetime
    # A drained or evicted busy runner gets this long to finish its job (the template's
    # own value, if it sets one, wins).
    pod.setdefault("terminationGracePeriodSeconds", spec.termination_grace_period_seconds)

    metadata: dict[str, Any] = {"labels": {**(user_meta.get("labels") or {}), **labels}}
    if user_meta.get("annotations"):
        metadata["annotations"] = dict(user_meta["annotations"])
    return {"metadata": metadata, "spec": pod}


def render_runner_job(
    *,
    group_name: str,
    namespace: str,
    group_uid: str,
    spec: RunnerGroupSpec,
    job_name: str,
    ttl_seconds_after_finished: int = TTL_SECONDS_AFTER_FINISHED,
    shard: str | None = None,
) -> dict[str, Any]:
    """``job_name`` comes from :func:`~gitea_runner_operator.api.naming.new_job_name`: it
    carries the group's UID hash, which is what proves a registration is this group's.
    ``shard``: the bucket of the group's capacity domain (api/shard.py), on the Job and in
    its Pod template (a Job's template cannot change later); without it, the bucket of the
    group as a domain of its own (one replica)."""
    labels = group_labels(group_name, shard or lone_shard(f"{namespace}/{group_name}"))
    job_spec: dict[str, Any] = {
        "ttlSecondsAfterFinished": ttl_seconds_after_finished,
        "backoffLimit": BACKOFF_LIMIT,
        "template": render_pod_template(spec, labels),
    }
    lifetime = spec.max_runner_lifetime_seconds
    if lifetime is not None:
        # The Pod's deadline is enforced by the kubelet; the Job's stops a retry from
        # starting a fresh runner after the cap.
        job_spec["activeDeadlineSeconds"] = lifetime
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {constants.RUNNER_LABELS_ANNOTATION: ",".join(rendered_labels(spec))},
            "ownerReferences": [owner_reference(group_name, group_uid)],
        },
        "spec": job_spec,
    }
