"""Render the objects of a group's cache server (``spec.cache``), as pure functions.

RunnerGroup in, manifest dicts out: a Deployment running the runner image's
``gitea-runner cache-server``, its storage (a PVC, or an emptyDir when ``persistent: false``),
a ClusterIP Service, and the Secret with the generated ``external_secret`` and the config
files built from it. Every object is owned by the group (garbage-collected with it).

The cache server's labels deliberately differ from the runner Jobs' (no
``gitea.bpg.pw/managed-by``): the operator's informers select on that label, and a cache
server Pod must never be counted as a runner.

The Pod passes Pod Security ``restricted``: non-root, no privilege escalation, all
capabilities dropped, the runtime's seccomp profile, a read-only root file system, no
ServiceAccount token. It follows the group's template where a team places its Pods
(node selector, affinity, tolerations, pull secrets, priority class, pod security context,
the runner container's image and pull policy).
"""

from __future__ import annotations

import base64
import copy
from typing import Any, Final

from gitea_runner_operator.api import constants
from gitea_runner_operator.api.cache import (
    CACHE_PORT,
    RUNNER_CONFIG_KEY,
    SERVER_CONFIG_KEY,
    cache_object_name,
    service_host,
)
from gitea_runner_operator.api.naming import owner_reference
from gitea_runner_operator.api.pod_template import RUNNER_CONTAINER
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.objects.security import restricted_container_security

CACHE_OF_LABEL: Final = f"{constants.GROUP}/cache-of"
CONTAINER: Final = "cache-server"
UID: Final = 1000
DATA_DIR: Final = "/data"
CONFIG_DIR: Final = "/etc/gitea-runner-cache"
# The runner images ship the binary as gitea-runner (1.x) or act_runner (older). The cache
# server stops on SIGINT only (v1.0.8's main swallows SIGTERM into a context that
# ``cache-server`` never reads), so the kubelet's SIGTERM is passed on as SIGINT; otherwise
# every rollout and eviction would wait out the grace period and end in a SIGKILL.
SCRIPT: Final = """\
bin=$(command -v gitea-runner || command -v act_runner)
"$bin" cache-server "$@" &
pid=$!
trap 'kill -INT "$pid"' TERM INT
wait "$pid"
rc=$?
if kill -0 "$pid" 2>/dev/null; then wait "$pid"; rc=$?; fi
exit "$rc"
"""
COMMAND: Final = ["/bin/sh", "-c", SCRIPT, "cache-server"]
# Where the team's runner Pods go, the cache server goes too.
_PLACEMENT: Final = (
    "nodeSelector",
    "affinity",
    "tolerations",
    "imagePullSecrets",
    "priorityClassName",
)


def cache_labels(group_name: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "gitea-runner-cache",
        "app.kubernetes.io/managed-by": constants.MANAGED_BY_VALUE,
        CACHE_OF_LABEL: group_name,
    }


def _meta(group_name: str, namespace: str, group_uid: str) -> dict[str, Any]:
    return {
        "name": cache_object_name(group_name),
        "namespace": namespace,
        "labels": cache_labels(group_name),
        "ownerReferences": [owner_reference(group_name, group_uid)],
    }


def made_for(obj: dict[str, Any], group_name: str, group_uid: str) -> bool:
    """Whether an existing object is this group's cache object: it carries the group's
    label and an owner reference to the group. Anything else of that name belongs to
    someone else, and the operator never applies over, reuses or deletes it."""
    meta = obj.get("metadata") or {}
    if (meta.get("labels") or {}).get(CACHE_OF_LABEL) != group_name:
        return False
    return any(
        ref.get("kind") == constants.KIND
        and str(ref.get("apiVersion") or "").split("/")[0] == constants.GROUP
        and ref.get("uid") == group_uid
        for ref in meta.get("ownerReferences") or []
    )


def render_secret(
    *, group_name: str, namespace: str, group_uid: str, values: dict[str, str]
) -> dict[str, Any]:
    """The Secret holding ``external-secret`` and the two config files made from it."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(group_name, namespace, group_uid),
        "type": "Opaque",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in sorted(values.items())},
    }


def render_service(*, group_name: str, namespace: str, group_uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(group_name, namespace, group_uid),
        "spec": {
            "type": "ClusterIP",
            "selector": cache_labels(group_name),
            "ports": [{"name": "http", "port": CACHE_PORT, "targetPort": "http"}],
        },
    }


def render_pvc(
    *, group_name: str, namespace: str, group_uid: str, spec: RunnerGroupSpec
) -> dict[str, Any]:
    cache = spec.cache
    assert cache is not None
    pvc_spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": cache.size}},
    }
    if cache.storage_class_name is not None:
        pvc_spec["storageClassName"] = cache.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(group_name, namespace, group_uid),
        "spec": pvc_spec,
    }


def _template_runner(spec: RunnerGroupSpec) -> dict[str, Any]:
    pod = (spec.template or {}).get("spec") or {}
    return next((c for c in pod.get("containers") or [] if c.get("name") == RUNNER_CONTAINER), {})


def cache_image(spec: RunnerGroupSpec) -> str:
    """The runner image the group's template names, else ``spec.image``, else the plain
    runner image: the cache server is the same binary as the runner."""
    return str(_template_runner(spec).get("image") or spec.image or constants.PLAIN_IMAGE)


def render_deployment(
    *, group_name: str, namespace: str, group_uid: str, spec: RunnerGroupSpec
) -> dict[str, Any]:
    cache = spec.cache
    assert cache is not None
    name = cache_object_name(group_name)
    labels = cache_labels(group_name)
    template_pod: dict[str, Any] = (spec.template or {}).get("spec") or {}
    runner = _template_runner(spec)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": cache_image(spec),
        "command": COMMAND,
        "args": [
            "--config",
            f"{CONFIG_DIR}/config.yaml",
            "--dir",
            f"{DATA_DIR}/cache",
            "--port",
            str(CACHE_PORT),
            # The host the server writes into the signed download URLs it hands out: the
            # Service, so a download never depends on this Pod's IP.
            "--host",
            service_host(group_name, namespace),
        ],
        "ports": [{"name": "http", "containerPort": CACHE_PORT, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 5},
        "livenessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 20},
        "securityContext": restricted_container_security(UID, read_only_root=True),
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_DIR},
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        ],
    }
    if runner.get("imagePullPolicy"):
        container["imagePullPolicy"] = runner["imagePullPolicy"]
    if cache.resources is not None:
        container["resources"] = copy.deepcopy(cache.resources)
    data: dict[str, Any] = (
        {"persistentVolumeClaim": {"claimName": name}}
        if cache.persistent
        else {"emptyDir": {"sizeLimit": cache.size}}
    )
    pod: dict[str, Any] = {
        key: copy.deepcopy(template_pod[key]) for key in _PLACEMENT if key in template_pod
    }
    pod |= {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": UID,
            "runAsGroup": UID,
            "fsGroup": UID,
            "seccompProfile": {"type": "RuntimeDefault"},
            **copy.deepcopy(template_pod.get("securityContext") or {}),
        },
        "containers": [container],
        "volumes": [
            {"name": "data", **data},
            {
                "name": "config",
                "secret": {
                    "secretName": name,
                    "items": [{"key": SERVER_CONFIG_KEY, "path": "config.yaml"}],
                },
            },
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(group_name, namespace, group_uid),
        "spec": {
            "replicas": 1,
            # One writer of a ReadWriteOnce volume: the old Pod goes before the new one starts.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def runner_config_volume(group_name: str) -> dict[str, Any]:
    """The runner Pods' config file when the group has a cache: the merged config in the
    operator's Secret (it carries ``external_secret``), mounted, never copied into the Job."""
    return {
        "name": "gro-runner-config",
        "secret": {
            "secretName": cache_object_name(group_name),
            "items": [{"key": RUNNER_CONFIG_KEY, "path": "config.yaml"}],
        },
    }
