"""The fields of ``spec.template`` that the operator owns, and the check that a template leaves
them alone.

The template is kept as the raw dict the user wrote (the CRD's schema, generated from the API
server's own PodTemplateSpec, already checked its shape) so that every field passes through to
the runner Pod unchanged, including ones newer than this operator. Only the few fields without
which a runner Pod would not be *this group's* runner are checked here; the CRD checks the same
with CEL where CEL can, and this check covers the rest and any CRD that is out of date.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gitea_runner_operator.api import constants

RUNNER_CONTAINER: Final = "runner"
# Host mode's init container that registers the runner, so the runner never holds the token.
REGISTER_CONTAINER: Final = "gro-register"
# The native sidecar that hands a cache group's runner its config once (objects/config_handoff.py).
HANDOFF_CONTAINER: Final = "gro-config"
RESERVED_CONTAINERS: Final = frozenset({REGISTER_CONTAINER, HANDOFF_CONTAINER})

# The runner container's environment that registers it as this group's ephemeral runner.
OWNED_ENV: Final = frozenset(
    {
        "GITEA_INSTANCE_URL",
        "GITEA_RUNNER_REGISTRATION_TOKEN",
        "GITEA_RUNNER_REGISTRATION_TOKEN_FILE",
        "GITEA_RUNNER_NAME",
        "GITEA_RUNNER_LABELS",
        "GITEA_RUNNER_EPHEMERAL",
    }
)
# Pod labels and annotations under the operator's own prefix: the informers select on them.
OWNED_KEY_PREFIX: Final = f"{constants.GROUP}/"
# Volumes the operator adds that carry a credential or configuration it must control.
OWNED_VOLUMES: Final = frozenset(
    {
        "gro-ca-bundle",
        "gro-runner-config",
        "gro-config-handoff",
        "gro-config-state",
        "gro-runner-bin",
    }
)
# Of those, the ones no template container may mount: they hold, or hand over, the runner's
# config with the cache's secret (only the operator's init containers mount them).
PRIVATE_VOLUMES: Final = frozenset({"gro-runner-config", "gro-config-handoff", "gro-config-state"})
_METADATA_FIELDS: Final = frozenset({"labels", "annotations"})


class FieldError(ValueError):
    """A bad value at ``path`` (relative to the validated field, e.g. ``.spec.restartPolicy``)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def check_template(template: Any) -> None:
    """Raise :class:`FieldError` naming the first owned or malformed field of a template."""
    if not isinstance(template, Mapping):
        raise FieldError("", "must be an object (a Pod template: metadata and spec)")
    for key in template:
        if key not in ("metadata", "spec"):
            raise FieldError(f".{key}", "unknown field; a Pod template has metadata and spec")
    _check_metadata(template.get("metadata"))
    _check_pod_spec(template.get("spec"))


# Set by the operator on busy runner Pods (and only on them), so that a node autoscaler
# never evicts a running CI job, and never keeps a node alive for an idle runner.
SCALE_DOWN_ANNOTATIONS = {
    "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
    "karpenter.sh/do-not-disrupt": "true",
}


def _check_metadata(metadata: Any) -> None:
    if metadata is None:
        return
    if not isinstance(metadata, Mapping):
        raise FieldError(".metadata", "must be an object")
    for key in metadata:
        if key not in _METADATA_FIELDS:
            raise FieldError(
                f".metadata.{key}", "only labels and annotations can be set on runner Pods"
            )
    for field in sorted(_METADATA_FIELDS):
        values = metadata.get(field)
        if values is None:
            continue
        if not isinstance(values, Mapping):
            raise FieldError(f".metadata.{field}", "must be a map of strings")
        for key, value in values.items():
            if not isinstance(value, str):
                raise FieldError(f".metadata.{field}[{key}]", "must be a string")
            if str(key).startswith(OWNED_KEY_PREFIX):
                raise FieldError(
                    f".metadata.{field}[{key}]",
                    f"keys under {OWNED_KEY_PREFIX} are set by the operator",
                )
            if key in SCALE_DOWN_ANNOTATIONS:
                raise FieldError(
                    f".metadata.{field}[{key}]",
                    "set by the operator on busy runner Pods only, so idle ones never hold a node",
                )


def _check_pod_spec(spec: Any) -> None:
    if spec is None:
        return
    if not isinstance(spec, Mapping):
        raise FieldError(".spec", "must be an object (a PodSpec)")
    if "restartPolicy" in spec:
        raise FieldError(
            ".spec.restartPolicy", "is set by the operator (OnFailure); remove it from the template"
        )
    for field in ("containers", "initContainers"):
        containers = spec.get(field)
        if containers is None:
            continue
        if not isinstance(containers, list):
            raise FieldError(f".spec.{field}", "must be a list")
        names: set[str] = set()
        for i, container in enumerate(containers):
            path = f".spec.{field}[{i}]"
            if not isinstance(container, Mapping) or not isinstance(container.get("name"), str):
                raise FieldError(path, "must be an object with a name")
            if container["name"] in names:
                raise FieldError(f"{path}.name", f"{container['name']!r} is listed twice")
            names.add(container["name"])
            if container["name"] in RESERVED_CONTAINERS:
                raise FieldError(
                    f"{path}.name",
                    f"{container['name']!r} is reserved for an init container of the operator's "
                    f"({REGISTER_CONTAINER} registers the runner, {HANDOFF_CONTAINER} hands it "
                    "its cache config)",
                )
            _check_private_mounts(path, container)
            if field == "containers" and container["name"] == RUNNER_CONTAINER:
                _check_runner_env(path, container)
    volumes = spec.get("volumes")
    if isinstance(volumes, list):
        for i, volume in enumerate(volumes):
            if isinstance(volume, Mapping) and volume.get("name") in OWNED_VOLUMES:
                raise FieldError(
                    f".spec.volumes[{i}].name",
                    f"{volume['name']!r} is reserved for a volume the operator adds",
                )


def _check_private_mounts(path: str, container: Mapping[str, Any]) -> None:
    mounts = container.get("volumeMounts")
    if not isinstance(mounts, list):
        return
    for i, mount in enumerate(mounts):
        if isinstance(mount, Mapping) and mount.get("name") in PRIVATE_VOLUMES:
            raise FieldError(
                f"{path}.volumeMounts[{i}].name",
                f"{mount['name']!r} holds the runner config with the cache's secret; "
                "no container of the template may mount it",
            )


def _check_runner_env(path: str, container: Mapping[str, Any]) -> None:
    env = container.get("env")
    if env is None:
        return
    if not isinstance(env, list):
        raise FieldError(f"{path}.env", "must be a list")
    for i, entry in enumerate(env):
        name = entry.get("name") if isinstance(entry, Mapping) else None
        if name in OWNED_ENV:
            raise FieldError(
                f"{path}.env[{i}].name",
                f"{name} is set by the operator for the runner container; remove it",
            )
