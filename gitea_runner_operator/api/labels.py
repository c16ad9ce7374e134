"""The runner label grammar: ``name[:schema[:arg]]``.

Gitea matches jobs to runners on the label *name* only; the schema tells the runner how to run
a job (on the host, in a Docker image, in a Kubernetes pod). We keep the full string for the
runner's registration and match on the name, exactly as the runner itself splits it: a colon
that introduces no known schema is part of the name, so ``app:infra`` is the label ``app:infra``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


class Schema(StrEnum):
    """How a runner executes jobs that carry this label."""

    HOST = "host"
    DOCKER = "docker"
    KUBERNETES = "kubernetes"


class LabelError(ValueError):
    """A label string that the runner would reject or that we could not pass on safely."""


# Characters that would break GITEA_RUNNER_LABELS (comma-separated, no spaces) or YAML.
_FORBIDDEN_NAME_CHARS = re.compile(r"[,\s]")
_SCHEMAS_WITH_IMAGE = (Schema.DOCKER, Schema.KUBERNETES)


@dataclass(frozen=True, slots=True)
class RunnerLabel:
    """One parsed label; ``raw`` is what the runner registers with."""

    name: str
    schema: Schema | None
    arg: str | None
    raw: str

    @classmethod
    def parse(cls, raw: str) -> RunnerLabel:
        """Parse one label, raising :class:`LabelError` with a reason a user can act on."""
        if raw != raw.strip():
            raise LabelError(f"label {raw!r} starts or ends with white space")
        name, schema, arg = _split(raw)
        if not name:
            raise LabelError(f"label {raw!r} has an empty name")
        if _FORBIDDEN_NAME_CHARS.search(raw):
            raise LabelError(f"label {raw!r} contains a comma or white space")
        return cls(name=name, schema=schema, arg=arg, raw=raw)


def _split(raw: str) -> tuple[str, Schema | None, str | None]:
    """Find the first colon that introduces a known schema; everything before it is the name."""
    start = 0
    while (colon := raw.find(":", start)) != -1:
        name, rest = raw[:colon], raw[colon + 1 :]
        if rest == Schema.HOST.value:
            return name, Schema.HOST, None
        if rest.startswith(Schema.HOST.value + ":"):
            raise LabelError(f"label {raw!r}: schema 'host' takes no argument")
        for schema in _SCHEMAS_WITH_IMAGE:
            if rest == schema.value or rest.startswith(schema.value + ":"):
                arg = rest[len(schema.value) + 1 :]
                if not arg.startswith("//") or len(arg) <= 2:
                    raise LabelError(
                        f"label {raw!r}: schema {schema.value!r} needs an image, "
                        f"as in 'name:{schema.value}://image'"
                    )
                return name, schema, arg
        start = colon + 1
    return raw, None, None


def label_names(labels: list[RunnerLabel]) -> frozenset[str]:
    """The set Gitea compares a job's ``runs-on`` against."""
    return frozenset(label.name for label in labels)
