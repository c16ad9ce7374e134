"""The runner label grammar, parsed exactly as the runner parses it.

Gitea matches jobs to runners on the label *name* only; the schema tells the runner how to
run a job (on the host, in a Docker image, in a Kubernetes pod). The operator counts demand
by name, so it must split a label where the runner will, or it counts jobs its runners never
take. The runner (gitea/runner v1.0.8, ``internal/pkg/labels``) splits at the *first* colon
and refuses a schema it does not know: ``gitea-runner register --labels app:infra`` exits 1
with ``unsupported schema: infra`` (recorded with the official runner against real Gitea), so a
label name can never contain a colon, and such a label is refused here with the reason
instead of starting runners that can never register. Which schemas a runner knows depends
on its version: every supported runner knows ``host`` and ``docker``; v1.0.8 does not know
``kubernetes://image`` either. A group therefore says which schemas its runner image
understands (``spec.labelSchemas``, default host and docker), and a label using any other
schema is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class Schema(StrEnum):
    """How a runner executes jobs that carry this label."""

    HOST = "host"
    DOCKER = "docker"
    KUBERNETES = "kubernetes"


# What the default runner image understands.
DEFAULT_SCHEMAS: frozenset[Schema] = frozenset({Schema.HOST, Schema.DOCKER})


class LabelError(ValueError):
    """A label string that the runner would reject or misread, or that we could not pass on
    safely."""


# Characters that would break GITEA_RUNNER_LABELS (comma-separated, no spaces) or YAML.
_FORBIDDEN_NAME_CHARS = re.compile(r"[,\s]")


@dataclass(frozen=True, slots=True)
class RunnerLabel:
    """One parsed label; ``raw`` is what the runner registers with."""

    name: str
    schema: Schema | None
    arg: str | None
    raw: str

    @classmethod
    def parse(cls, raw: str, schemas: Iterable[Schema] = DEFAULT_SCHEMAS) -> RunnerLabel:
        """Parse one label, raising :class:`LabelError` with a reason a user can act on.
        ``schemas`` are the schemas the group's runner image understands."""
        if raw != raw.strip():
            raise LabelError(f"label {raw!r} starts or ends with white space")
        if _FORBIDDEN_NAME_CHARS.search(raw):
            raise LabelError(f"label {raw!r} contains a comma or white space")
        name, schema, arg = _split(raw, frozenset(schemas))
        if not name:
            raise LabelError(f"label {raw!r} has an empty name")
        return cls(name=name, schema=schema, arg=arg, raw=raw)


def _split(raw: str, known: frozenset[Schema]) -> tuple[str, Schema | None, str | None]:
    """Split at the first colon, as the runner does; an unknown schema is refused, as the
    runner refuses it."""
    name, colon, rest = raw.partition(":")
    if not colon:
        return raw, None, None
    schema_text, _, arg = rest.partition(":")
    if schema_text == Schema.HOST.value:
        if arg:
            raise LabelError(f"label {raw!r}: schema 'host' takes no argument")
        return name, Schema.HOST, None
    if schema_text == Schema.DOCKER.value:
        if not arg.startswith("//") or len(arg) <= 2:
            raise LabelError(
                f"label {raw!r}: schema 'docker' needs an image, as in 'name:docker://image'"
            )
        return name, Schema.DOCKER, arg
    if schema_text == Schema.KUBERNETES.value:
        if not arg.startswith("//") or len(arg) <= 2:
            raise LabelError(
                f"label {raw!r}: schema 'kubernetes' needs an image, "
                "as in 'name:kubernetes://image'"
            )
        if Schema.KUBERNETES not in known:
            raise LabelError(
                f"label {raw!r}: the default runner does not know the schema 'kubernetes' "
                "and refuses to register ('unsupported schema'); list 'kubernetes' in "
                "spec.labelSchemas if the image runs a runner that does"
            )
        return name, Schema.KUBERNETES, arg
    raise LabelError(
        f"label {raw!r}: the runner reads it as name {name!r} with schema {schema_text!r}, "
        "which it does not know, and refuses to register ('unsupported schema'); a label "
        "name cannot contain ':' (use e.g. '-' instead)"
    )


def label_names(labels: Iterable[RunnerLabel]) -> frozenset[str]:
    """The set Gitea compares a job's ``runs-on`` against."""
    return frozenset(label.name for label in labels)
