"""The runner label grammar, parsed exactly as the runner parses it.

Gitea matches jobs to runners on the label *name* only; the schema tells the runner how to
run a job (on the host, in a Docker image, in a Kubernetes pod). The operator counts demand
by name, so it must split a label where the runner will, or it counts jobs its runners never
take. The runner (gitea/act_runner, internal/pkg/labels) splits at the *first* colon; if what
follows is not a schema it knows, the whole string is the name (``app:infra`` is one label
named ``app:infra``). Which schemas it knows depends on its version: every supported runner
knows ``host`` and ``docker``; only newer ones know ``kubernetes://image``, and an older one
registers ``k:kubernetes://img`` under that whole string, so its runners would never take a
``runs-on: k`` job. A group therefore says which schemas its runner image understands
(``spec.labelSchemas``, default host and docker), and a label using any other schema is
refused with the reason instead of being counted under a name the runner will not use.
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
    """Split at the first colon, as the runner does; an unknown schema means no schema."""
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
                f"label {raw!r}: the runner image would read this as one label named "
                f"{raw!r} (it does not know the schema 'kubernetes'); list 'kubernetes' in "
                "spec.labelSchemas if the image runs a runner that does"
            )
        return name, Schema.KUBERNETES, arg
    # Not a schema: the runner keeps the whole string as the name (a host-like label).
    return raw, None, None


def label_names(labels: Iterable[RunnerLabel]) -> frozenset[str]:
    """The set Gitea compares a job's ``runs-on`` against."""
    return frozenset(label.name for label in labels)
