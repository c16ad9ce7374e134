"""The mark ``helm uninstall`` puts on a RunnerGroup it leaves in place.

A stop signal cannot tell an uninstall from a rolling restart (both are a SIGTERM to the
Pod), so the operator never detaches on its own: only the chart's pre-delete hook, which
Helm runs on ``helm uninstall`` and never on an upgrade, writes these two annotations. While
they are there and ``until`` lies ahead, the operator treats the group as it treats a
deleted one (idle runners deregistered, busy ones drained within ``drainTimeout``), then
releases its finalizer and creates nothing more for it. The spec is never touched.

``until`` bounds the mark: a hook that died half-way (its operator still running after a
failed uninstall) leaves groups that come back into service once it has passed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gitea_runner_operator.api import constants

SINCE_ANNOTATION = f"{constants.GROUP}/detach-since"
UNTIL_ANNOTATION = f"{constants.GROUP}/detach-until"
ANNOTATIONS = (SINCE_ANNOTATION, UNTIL_ANNOTATION)


@dataclass(frozen=True, slots=True)
class Detach:
    """A detach in force: when it was asked (the drain counts from there) and its end."""

    since: float
    until: float


def stamp(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(value: Any) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def detaching(meta: dict[str, Any], now: float) -> Detach | None:
    """The detach asked of this group, if one is in force at ``now``; a mark that cannot be
    read, or whose end has passed, is none (the group is served as before)."""
    annotations = meta.get("annotations") or {}
    since, until = (_parse(annotations.get(a)) for a in ANNOTATIONS)
    if since is None or until is None or now >= until:
        return None
    return Detach(since=since, until=until)


def marks(since: float, until: float) -> dict[str, str]:
    """The annotations the hook writes."""
    return {SINCE_ANNOTATION: stamp(since), UNTIL_ANNOTATION: stamp(until)}
