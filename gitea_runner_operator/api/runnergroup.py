"""RunnerGroup spec and status models.

The API server validates the CRD's OpenAPI schema and CEL rules first; these models validate
the same things again because an operator must never trust that a CRD of the right version is
installed (or that a dry-run-less kubectl edit went through it). A failure here becomes a
``Ready=False, reason=InvalidSpec`` condition that names the field, never a crash.
"""

from __future__ import annotations

import math
import re
from enum import StrEnum
from functools import cached_property
from typing import Annotated, Any, Self

from pydantic import Field, ValidationError, field_validator, model_validator

from gitea_runner_operator.api import caps, constants
from gitea_runner_operator.api.cache import CacheSpec, check_host_steps
from gitea_runner_operator.api.duration import parse_duration
from gitea_runner_operator.api.forge import Flavor
from gitea_runner_operator.api.labels import DEFAULT_SCHEMAS, LabelError, RunnerLabel, Schema
from gitea_runner_operator.api.pod_template import FieldError, check_template
from gitea_runner_operator.api.refs import GITEA_NAME as _GITEA_NAME
from gitea_runner_operator.api.refs import CamelModel as _CamelModel
from gitea_runner_operator.api.refs import (
    GiteaRef,
    RunnerConfigRef,
    SecretKeyRef,
    SecretSource,
)
from gitea_runner_operator.kit.jsonlimits import too_deep


class Scope(StrEnum):
    """Which Gitea entity the group's runners are registered to, and whose jobs they take."""

    GLOBAL = "global"
    ORG = "org"
    REPO = "repo"


class WebhookSpec(_CamelModel):
    """The group's own webhook secret, for teams that can add org or repo hooks but not a
    system hook. It authorises deliveries for this group's scope only. With ``manage_hook``
    the operator keeps the hook in Gitea itself (the API token must be allowed to).
    ``poll_interval``: the safety-net poll while its deliveries are known to arrive
    (api/cadence.py), within the platform's bound and never shorter than the group's own."""

    secret_ref: SecretKeyRef
    manage_hook: bool = False
    poll_interval: caps.Duration = constants.DEFAULT_WEBHOOK_POLL_INTERVAL

    @field_validator("poll_interval")
    @classmethod
    def _poll_bounds(cls, value: str) -> str:
        return _bounded_duration(
            value,
            constants.MIN_POLL_INTERVAL_SECONDS,
            constants.MAX_WEBHOOK_POLL_INTERVAL_SECONDS,
        )

    @property
    def poll_interval_seconds(self) -> float:
        return parse_duration(self.poll_interval)


class RetrySpec(_CamelModel):
    """Re-running jobs whose runner was lost (docs/lost-runners.md)."""

    on_runner_loss: int = Field(default=1, ge=0, le=10)


class RunnerMode(StrEnum):
    """How a runner Pod gives workflow jobs a place to run (see docs/runners.md).

    ``dind-userns``, the default for new groups: a Docker daemon sidecar in the runner Pod's
    own user namespace (``hostUsers: false``), no privileged container. The other two Docker
    modes run a privileged container and are an explicit choice
    (docs/decisions/0006-docker-in-a-user-namespace.md)."""

    DIND_USERNS = "dind-userns"
    DIND_ROOTLESS = "dind-rootless"
    DIND = "dind"
    HOST = "host"


class RunnerGroupSpec(_CamelModel):
    """What a team asks for. Field names match the CRD (camelCase in YAML)."""

    scope: Scope
    org: str | None = Field(default=None, max_length=caps.GITEA_NAME_MAX_CHARS)
    repo: str | None = Field(default=None, max_length=caps.GITEA_NAME_MAX_CHARS)
    gitea: GiteaRef
    labels: list[caps.SpecLabel] = Field(min_length=1, max_length=caps.SPEC_LABELS_MAX)
    label_schemas: list[Schema] = Field(
        default_factory=lambda: sorted(DEFAULT_SCHEMAS), max_length=caps.SCHEMAS_MAX
    )
    max_active_runners: int = Field(ge=1, le=caps.RUNNERS_MAX)
    # Required for Gitea; a Forgejo group registers each runner through the API instead.
    registration_token: SecretSource | None = None
    auth_token: SecretSource
    # None: the mode's own image (see ``runner_image``).
    image: str | None = Field(default=None, min_length=1, max_length=caps.IMAGE_MAX_CHARS)
    poll_interval: caps.Duration = constants.DEFAULT_POLL_INTERVAL
    idle_timeout: caps.Duration = constants.DEFAULT_IDLE_TIMEOUT
    startup_timeout: caps.Duration = constants.DEFAULT_STARTUP_TIMEOUT
    drain_timeout: caps.Duration = constants.DEFAULT_DRAIN_TIMEOUT
    min_idle_runners: int = Field(default=0, ge=0, le=caps.RUNNERS_MAX)
    warm_runner_max_age: caps.Duration = constants.DEFAULT_WARM_MAX_AGE
    webhook: WebhookSpec | None = None
    # The CRD defaults it too, and writes the default into a new object: a group created before
    # dind-userns was the default keeps the mode stored with it.
    mode: RunnerMode = RunnerMode.DIND_USERNS
    # Kept as written, so every Pod field reaches the runner Pod unchanged; only the fields
    # the operator owns are checked (api/pod_template.py). Bounded in depth and bytes first.
    template: (
        Annotated[
            dict[str, Any],
            caps.bounded_object(caps.TEMPLATE_MAX_BYTES, caps.TEMPLATE_MAX_DEPTH),
        ]
        | None
    ) = None
    runner_config: RunnerConfigRef | None = None
    max_runner_lifetime: caps.Duration | None = None
    retry: RetrySpec = Field(default_factory=RetrySpec)
    # How long a stopping runner Pod may take to finish its job (drain, eviction).
    termination_grace_period: caps.Duration = constants.DEFAULT_TERMINATION_GRACE_PERIOD
    cache: CacheSpec | None = None

    @field_validator("org", "repo")
    @classmethod
    def _gitea_name(cls, value: str | None) -> str | None:
        if value is not None and not _GITEA_NAME.match(value):
            raise ValueError(f"{value!r} is not a valid Gitea owner or repository name")
        return value

    @field_validator("label_schemas")
    @classmethod
    def _schemas(cls, value: list[Schema]) -> list[Schema]:
        missing = DEFAULT_SCHEMAS - set(value)
        if missing:
            raise ValueError(
                f"every runner understands {', '.join(sorted(DEFAULT_SCHEMAS))}; "
                f"keep {', '.join(sorted(missing))} in the list"
            )
        return value

    @model_validator(mode="after")
    def _parse_labels(self) -> Self:
        names: set[str] = set()
        for raw in self.labels:
            try:
                label = RunnerLabel.parse(raw, self.label_schemas)
            except LabelError as exc:
                raise ValueError(f"labels: {exc}") from None
            if label.name in names:
                raise ValueError(f"labels: label name {label.name!r} is listed twice")
            names.add(label.name)
        hosts = [
            raw
            for raw in self.labels
            if RunnerLabel.parse(raw, self.label_schemas).schema is Schema.HOST
        ]
        pod = (self.template or {}).get("spec")
        check_host_steps(self.cache, mode=self.mode.value, host_labels=hosts, pod_spec=pod)
        return self

    @field_validator("poll_interval")
    @classmethod
    def _poll_bounds(cls, value: str) -> str:
        return _bounded_duration(
            value, constants.MIN_POLL_INTERVAL_SECONDS, constants.MAX_POLL_INTERVAL_SECONDS
        )

    @field_validator("idle_timeout")
    @classmethod
    def _idle_bounds(cls, value: str) -> str:
        return _bounded_duration(
            value, constants.MIN_IDLE_TIMEOUT_SECONDS, constants.MAX_IDLE_TIMEOUT_SECONDS
        )

    @field_validator("startup_timeout")
    @classmethod
    def _startup_bounds(cls, value: str) -> str:
        return _bounded_duration(
            value, constants.MIN_STARTUP_TIMEOUT_SECONDS, constants.MAX_STARTUP_TIMEOUT_SECONDS
        )

    @field_validator("warm_runner_max_age")
    @classmethod
    def _warm_age_bounds(cls, value: str) -> str:
        return _bounded_duration(value, 60.0, constants.MAX_IDLE_TIMEOUT_SECONDS)

    @field_validator("drain_timeout")
    @classmethod
    def _drain_bounds(cls, value: str) -> str:
        return _bounded_duration(value, 0.0, constants.MAX_IDLE_TIMEOUT_SECONDS)

    @field_validator("max_runner_lifetime")
    @classmethod
    def _lifetime_bounds(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return _bounded_duration(
            value, constants.MIN_RUNNER_LIFETIME_SECONDS, constants.MAX_RUNNER_LIFETIME_SECONDS
        )

    @field_validator("termination_grace_period")
    @classmethod
    def _grace_bounds(cls, value: str) -> str:
        return _bounded_duration(value, 0.0, constants.MAX_RUNNER_LIFETIME_SECONDS)

    @field_validator("template")
    @classmethod
    def _owned_fields(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            check_template(value)
        return value

    @model_validator(mode="after")
    def _own_user_namespace(self) -> Self:
        pod_spec = (self.template or {}).get("spec") or {}
        if self.mode is RunnerMode.DIND_USERNS and pod_spec.get("hostUsers") is True:
            raise ValueError(
                "spec.template.spec.hostUsers: mode dind-userns runs the runner Pod in its "
                "own user namespace (hostUsers: false); to run in the host's, choose mode "
                "dind or dind-rootless (privileged) explicitly"
            )
        return self

    @model_validator(mode="after")
    def _one_lifetime(self) -> Self:
        pod_spec = (self.template or {}).get("spec") or {}
        if self.max_runner_lifetime is not None and "activeDeadlineSeconds" in pod_spec:
            raise ValueError(
                "set either spec.maxRunnerLifetime or "
                "spec.template.spec.activeDeadlineSeconds, not both"
            )
        return self

    @model_validator(mode="after")
    def _token_for_gitea(self) -> Self:
        if self.registration_token is None and self.gitea.flavor is not Flavor.FORGEJO:
            raise ValueError(
                "registrationToken: required unless spec.gitea.flavor is 'forgejo' "
                "(only Forgejo >= 15 registers each runner through its API)"
            )
        return self

    @model_validator(mode="after")
    def _warm_within_max(self) -> Self:
        if self.min_idle_runners > self.max_active_runners:
            raise ValueError(
                "minIdleRunners: must not exceed maxActiveRunners "
                f"({self.min_idle_runners} > {self.max_active_runners})"
            )
        return self

    @model_validator(mode="after")
    def _scope_fields(self) -> Self:
        if self.scope is Scope.GLOBAL and (self.org or self.repo):
            raise ValueError("org and repo must be empty when scope is 'global'")
        if self.scope in (Scope.ORG, Scope.REPO) and not self.org:
            raise ValueError(f"org is required when scope is '{self.scope.value}'")
        if self.scope is Scope.ORG and self.repo:
            raise ValueError("repo must be empty when scope is 'org'")
        if self.scope is Scope.REPO and not self.repo:
            raise ValueError("repo is required when scope is 'repo'")
        return self

    @cached_property
    def runner_labels(self) -> list[RunnerLabel]:
        """Parsed once per spec object: reconciles of many groups read it often."""
        return [RunnerLabel.parse(raw, self.label_schemas) for raw in self.labels]

    @cached_property
    def label_names(self) -> frozenset[str]:
        """The names Gitea matches a job's ``runs-on`` against."""
        return frozenset(label.name for label in self.runner_labels)

    @property
    def manages_hook(self) -> bool:
        """The operator keeps this group's own hook in Gitea (``spec.webhook.manageHook``)."""
        return self.webhook is not None and self.webhook.manage_hook

    @property
    def runner_image(self) -> str:
        """``spec.image``, else the mode's image (the rootless DinD one has its own daemon; the
        other modes run the plain runner, beside a daemon sidecar or none)."""
        if self.image:
            return self.image
        if self.mode is RunnerMode.DIND_ROOTLESS:
            return constants.DEFAULT_IMAGE
        return constants.PLAIN_IMAGE

    @property
    def max_runner_lifetime_seconds(self) -> int | None:
        """Whole seconds, rounded up, as activeDeadlineSeconds needs."""
        if self.max_runner_lifetime is None:
            return None
        return math.ceil(parse_duration(self.max_runner_lifetime))

    @property
    def termination_grace_period_seconds(self) -> int:
        """Whole seconds, rounded up, as terminationGracePeriodSeconds needs."""
        return math.ceil(parse_duration(self.termination_grace_period))

    @property
    def poll_interval_seconds(self) -> float:
        return parse_duration(self.poll_interval)

    @property
    def idle_timeout_seconds(self) -> float:
        return parse_duration(self.idle_timeout)

    @property
    def startup_timeout_seconds(self) -> float:
        return parse_duration(self.startup_timeout)

    @property
    def warm_runner_max_age_seconds(self) -> float:
        return parse_duration(self.warm_runner_max_age)

    @property
    def drain_timeout_seconds(self) -> float:
        return parse_duration(self.drain_timeout)

    @property
    def target(self) -> str:
        """A human name of what the group serves, as shown in the printer columns."""
        if self.scope is Scope.REPO:
            return f"{self.org}/{self.repo}"
        if self.scope is Scope.ORG:
            return f"{self.org}"
        return "*"


def _bounded_duration(value: str, low: float, high: float) -> str:
    seconds = parse_duration(value)
    if not low <= seconds <= high:
        raise ValueError(f"{value!r} is outside the allowed range {low:g}s..{high:g}s")
    return value


class InvalidSpec(ValueError):
    """The spec failed validation; ``message`` names every offending field."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def parse_spec(raw_spec: Any) -> RunnerGroupSpec:
    """Validate a raw ``spec`` dict, turning pydantic's errors into one readable sentence."""
    if not isinstance(raw_spec, dict):
        raise InvalidSpec("spec: must be an object")
    for name, value in raw_spec.items():
        if too_deep(value, caps.SPEC_VALUE_MAX_DEPTH):
            field = name if isinstance(name, str) and len(name) <= 64 else "?"
            limit = caps.SPEC_VALUE_MAX_DEPTH
            raise InvalidSpec(f"spec.{field}: nests deeper than {limit} levels")
    try:
        return RunnerGroupSpec.model_validate(raw_spec)
    except ValidationError as exc:
        raise InvalidSpec(_describe(exc)) from None


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in error["loc"])
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, FieldError):
            # A check inside a raw dict field (spec.template) names the field inside it.
            parts.append(f"spec.{loc}{cause.path}: {cause.message}")
            continue
        field = f"spec.{loc}" if loc else "spec"
        msg = str(error["msg"]).removeprefix("Value error, ")
        if not loc and (named := re.match(r"^([a-zA-Z]+): ", msg)):
            field, msg = f"spec.{named.group(1)}", msg[named.end() :]  # a cross-field rule
        parts.append(f"{field}: {msg}")
    return "; ".join(parts)
