"""``spec.cache``: a warm cache server per RunnerGroup, and the runner config that uses it.

An ephemeral runner starts with an empty ``actions/cache``: the group's runners share one
``gitea-runner cache-server`` instead (the real runner's own, v1.0.8). Each runner's config
names it in ``cache.external_server`` and carries ``cache.external_secret``; with them the
runner registers every job's ``ACTIONS_RUNTIME_TOKEN`` and repository with the server, which
then answers that token only for that repository's entries (checked in the runner's
``act/artifactcache`` and ``internal/app/run/runner.go``). The runner reads the secret from
its config file only (no environment expansion), so the whole file is an operator-owned
Secret, never a ConfigMap or a Job field.

Pure values and functions: names, the merged config text, validation.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Annotated, Any, Self

import yaml
from pydantic import Field, field_validator, model_validator

from gitea_runner_operator.api import caps
from gitea_runner_operator.api.refs import CamelModel, SecretKeyRef
from gitea_runner_operator.api.urls import http_url
from gitea_runner_operator.api.yamltext import YamlRefused, load_within_caps

CACHE_PORT = 8088
DEFAULT_SIZE = "10Gi"
# A Kubernetes quantity, as the CRD's pattern says it (binary or decimal suffix).
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# Keys of the operator-owned Secret ``<group>-cache``.
SECRET_KEY = "external-secret"  # noqa: S105 - a key name, not a value
RUNNER_CONFIG_KEY = "runner-config.yaml"
SERVER_CONFIG_KEY = "cache-server.yaml"


class ExternalCacheServer(CamelModel):
    """An existing ``gitea-runner cache-server`` the group's runners use instead of one the
    operator creates; its ``external_secret`` comes from a Secret of the group's namespace."""

    url: str = Field(max_length=caps.URL_MAX_CHARS)
    secret_ref: SecretKeyRef

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        # actions/cache appends "_apis/artifactcache/..." to ACTIONS_CACHE_URL as it is.
        return http_url(value, credentials_hint="use secretRef") + "/"


class CacheSpec(CamelModel):
    enabled: bool = False
    size: str = Field(default=DEFAULT_SIZE, max_length=caps.QUANTITY_MAX_CHARS)
    storage_class_name: str | None = Field(
        default=None, min_length=1, max_length=caps.K8S_NAME_MAX_CHARS
    )
    # False: an emptyDir (bounded by ``size``) instead of a PVC; the cache lives as long as
    # the cache server's Pod, for clusters without a storage provisioner.
    persistent: bool = True
    # A core/v1 ResourceRequirements, kept as written.
    resources: (
        Annotated[
            dict[str, Any],
            caps.bounded_object(caps.RESOURCES_MAX_BYTES, caps.RESOURCES_MAX_DEPTH),
        ]
        | None
    ) = None
    external_server: ExternalCacheServer | None = None
    # The runner's cache.offline_mode; None leaves the group's runnerConfig to say.
    offline_mode: bool | None = None

    @field_validator("size")
    @classmethod
    def _quantity(cls, value: str) -> str:
        if not _QUANTITY.match(value):
            raise ValueError(f"{value!r} is not a storage quantity such as 10Gi")
        return value

    @model_validator(mode="after")
    def _external_alone(self) -> Self:
        if self.external_server is not None and (
            self.storage_class_name is not None or self.resources is not None
        ):
            raise ValueError(
                "cache: with externalServer the operator runs no cache server; "
                "remove storageClassName and resources"
            )
        return self

    @property
    def runs_server(self) -> bool:
        """The operator owns a cache server (Deployment, Service, storage) for the group."""
        return self.enabled and self.external_server is None


def uses_cache(cache: CacheSpec | None) -> bool:
    """The group's runners are pointed at a cache server (the operator's or an external one)."""
    return cache is not None and cache.enabled


def check_host_steps(
    cache: CacheSpec | None,
    *,
    mode: str,
    host_labels: list[str],
    pod_spec: Mapping[str, Any] | None = None,
) -> None:
    """Refuse what would put the cache's secret in reach of root in ``dind`` mode.

    - ``host`` labels: their steps run in the runner container, as the runner's user: root
      in the runner images of that mode, which reads any file and any root process's
      memory, the runner's (and so the cache's secret) included.
    - ``shareProcessNamespace``: the privileged DinD sidecar (and a job's
      ``docker run --privileged --pid=host``) would see ``gro-config``, whose
      ``/proc/<pid>/root`` holds the mounted Secret, and root with ``CAP_SYS_PTRACE`` may
      open it whatever its user.

    Host mode and ``dind-rootless`` run nothing as root with that capability in the Pod
    (shown on the real node with shared PIDs too)."""
    if not uses_cache(cache) or mode != "dind":
        return
    if host_labels:
        raise ValueError(
            f"spec.cache with mode dind and host labels ({', '.join(host_labels)}): their "
            "steps would run as root beside the runner and could read the cache's secret; "
            "use mode host or dind-rootless for host steps, or docker labels"
        )
    if (pod_spec or {}).get("shareProcessNamespace"):
        raise ValueError(
            "spec.cache with mode dind and spec.template.spec.shareProcessNamespace: the "
            "privileged Docker daemon, and its jobs, could read the cache's secret through "
            "the processes of the Pod's other containers; use mode dind-rootless or host, or "
            "leave the PID namespace unshared"
        )


def cache_object_name(group_name: str) -> str:
    """The name of the group's cache Deployment, Service, PVC and Secret: a DNS-1035 label
    (a Service's rule), ``<group>-cache`` where that fits, else shortened with a hash."""
    name = f"{group_name}-cache"
    if len(name) <= 63 and _DNS_LABEL.match(name):
        return name
    digest = hashlib.sha256(group_name.encode()).hexdigest()[:10]
    stem = re.sub(r"[^a-z0-9-]", "-", group_name.lower())[:40].strip("-")
    return f"gro-{stem}-{digest}-cache" if stem else f"gro-{digest}-cache"


def service_url(group_name: str, namespace: str) -> str:
    """Where runners and job containers reach the group's cache server: its Service by DNS
    name, with the trailing slash ``actions/cache`` expects of ``ACTIONS_CACHE_URL``."""
    return f"http://{service_host(group_name, namespace)}:{CACHE_PORT}/"


def service_host(group_name: str, namespace: str) -> str:
    return f"{cache_object_name(group_name)}.{namespace}.svc"


class RunnerConfigConflict(ValueError):
    """The group's runnerConfig cannot carry the cache settings (not a YAML mapping)."""


def merge_runner_config(
    user_text: str | None, *, server_url: str, secret: str, offline_mode: bool | None
) -> str:
    """The group's runner config with the cache section the operator owns laid over it: the
    user's other settings (and other cache keys, such as ``offline_mode``) are kept.

    ``cache.enabled`` is forced on: a group that asks for a cache gets one, whatever its
    runnerConfig says; ``external_server``/``external_secret`` are always the operator's."""
    try:
        doc: Any = load_within_caps(user_text) if user_text else None
    except YamlRefused as exc:
        raise RunnerConfigConflict(f"spec.runnerConfig {exc}") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise RunnerConfigConflict("spec.runnerConfig is not a YAML mapping")
    cache = doc.get("cache")
    if cache is None:
        cache = {}
    if not isinstance(cache, dict):
        raise RunnerConfigConflict("spec.runnerConfig: 'cache' is not a mapping")
    cache = {**cache, "enabled": True, "external_server": server_url, "external_secret": secret}
    if offline_mode is not None:
        cache["offline_mode"] = offline_mode
    return yaml.safe_dump({**doc, "cache": cache}, sort_keys=False)


def server_config(secret: str) -> str:
    """The cache server's config file: only the shared secret (which it reads from no flag
    or environment variable); directory, port and host are given as flags."""
    return yaml.safe_dump({"log": {"level": "info"}, "cache": {"external_secret": secret}})
