"""The model base and what a RunnerGroup spec names outside itself: keys of Secrets and
ConfigMaps in the group's namespace, and the Gitea it serves (with the certificates it trusts
for it).

Its own module so that spec parts in their own modules (``api/cache.py``) and
``api/runnergroup.py`` use one rule for a Secret name and key without importing each other,
and so that the readers of those objects (kube/configmaps.py, poll/trust.py) need not know
the whole spec.
"""

from __future__ import annotations

import re
from typing import ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from gitea_runner_operator.api import caps
from gitea_runner_operator.api.caps import K8sName
from gitea_runner_operator.api.forge import Flavor
from gitea_runner_operator.api.urls import http_url

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
# Gitea owner and repository names: alphanumerics, dash, underscore and dot.
GITEA_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


def is_repository(text: str) -> bool:
    """``owner/name`` by Gitea's grammar: safe to put into an API path (never ``..``)."""
    owner, slash, name = text.partition("/")
    return bool(slash) and all(
        GITEA_NAME.match(part) and part not in (".", "..") for part in (owner, name)
    )


class CamelModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )


class SecretKeyRef(CamelModel):
    """A key of a Secret in the RunnerGroup's own namespace."""

    KIND: ClassVar[str] = "Secret"  # what the errors name

    name: K8sName
    key: K8sName

    @field_validator("name")
    @classmethod
    def _dns_name(cls, value: str) -> str:
        if not DNS_SUBDOMAIN.match(value):
            raise ValueError(f"{value!r} is not a valid {cls.KIND} name")
        return value

    @field_validator("key")
    @classmethod
    def _key_chars(cls, value: str) -> str:
        if not SECRET_KEY.match(value):
            raise ValueError(f"{value!r} is not a valid {cls.KIND} key")
        return value


class SecretSource(CamelModel):
    secret_ref: SecretKeyRef


class ConfigMapKeyRef(SecretKeyRef):
    """A key of a ConfigMap in the RunnerGroup's own namespace."""

    KIND: ClassVar[str] = "ConfigMap"


class CABundleRef(CamelModel):
    """PEM certificates to trust for Gitea: exactly one of a ConfigMap key or a Secret key."""

    config_map_key_ref: ConfigMapKeyRef | None = None
    secret_key_ref: SecretKeyRef | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if (self.config_map_key_ref is None) == (self.secret_key_ref is None):
            raise ValueError("set exactly one of configMapKeyRef and secretKeyRef")
        return self

    @property
    def kind(self) -> str:
        return "ConfigMap" if self.config_map_key_ref is not None else "Secret"

    @property
    def ref(self) -> SecretKeyRef:
        ref = self.config_map_key_ref or self.secret_key_ref
        assert ref is not None  # guaranteed by _exactly_one
        return ref


class RunnerConfigRef(CamelModel):
    """The ConfigMap key holding the runner's config.yaml."""

    config_map_key_ref: ConfigMapKeyRef


class GiteaRef(CamelModel):
    url: str = Field(max_length=caps.URL_MAX_CHARS)
    ca_bundle: CABundleRef | None = None
    # Gitea or Forgejo; ``auto`` asks ``GET /api/forgejo/v1/version`` (see api/forge.py).
    flavor: Flavor = Flavor.AUTO

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return http_url(value, credentials_hint="use the Secrets")
