"""A tenant's YAML (``spec.runnerConfig``), loaded within caps: its size, then its nesting,
then the document, by libyaml's loader where PyYAML has it.

The pure-Python loader took 2.15 s of the event loop per MiB, and a deeply nested document
raised RecursionError out of its recursive constructor. The nesting is measured first on
the parser's event stream, which builds no objects and is not recursive, so a document
past the depth cap is refused before anything recursive sees it.
"""

from __future__ import annotations

from typing import Any, Final

import yaml

from gitea_runner_operator.api import caps

# libyaml's loader when PyYAML was built with it (the operator image's is), else PyYAML's.
LOADER: Final[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_OPEN: Final = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSE: Final = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


class YamlRefused(ValueError):
    """The text is past a cap; the message says which, as a phrase after the field's name."""


def load_within_caps(
    text: str,
    max_bytes: int = caps.RUNNER_CONFIG_MAX_BYTES,
    max_depth: int = caps.RUNNER_CONFIG_MAX_DEPTH,
) -> Any:
    """The document, or :class:`YamlRefused` past a cap, or ``yaml.YAMLError``."""
    size = len(text.encode())
    if size > max_bytes:
        raise YamlRefused(f"is {size} bytes, more than the {max_bytes} bytes allowed")
    depth = 0
    try:
        for event in yaml.parse(text, Loader=LOADER):
            if isinstance(event, _OPEN):
                depth += 1
                if depth > max_depth:
                    raise YamlRefused(f"nests deeper than {max_depth} levels")
            elif isinstance(event, _CLOSE):
                depth -= 1
    except yaml.MarkedYAMLError as exc:
        # libyaml's scanner reads flow brackets ahead of the events and stops at its own
        # bound (1,000 levels) first: that is our refusal too, said our way.
        if "maximum nesting depth" in str(exc.problem):
            raise YamlRefused(f"nests deeper than {max_depth} levels") from None
        raise
    return yaml.load(text, Loader=LOADER)  # noqa: S506 - LOADER is a safe loader
