"""The model base and the Secret reference every part of the RunnerGroup spec shares.

Its own module so that spec parts in their own modules (``api/cache.py``) and
``api/runnergroup.py`` use one rule for a Secret name and key without importing each other.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, field_validator
from pydantic.alias_generators import to_camel

from gitea_runner_operator.api.caps import K8sName

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

    name: K8sName
    key: K8sName

    @field_validator("name")
    @classmethod
    def _dns_name(cls, value: str) -> str:
        if not DNS_SUBDOMAIN.match(value):
            raise ValueError(f"{value!r} is not a valid Secret name")
        return value

    @field_validator("key")
    @classmethod
    def _key_chars(cls, value: str) -> str:
        if not SECRET_KEY.match(value):
            raise ValueError(f"{value!r} is not a valid Secret key")
        return value
