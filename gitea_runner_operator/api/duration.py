"""Go-style durations (``15s``, ``1m30s``, ``2h``), the format Kubernetes users already write."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_WHOLE = re.compile(r"^(?:\d+(?:\.\d+)?(?:ms|s|m|h))+$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Return the duration in seconds, or raise ValueError naming what was wrong."""
    if not _WHOLE.match(text):
        raise ValueError(f"{text!r} is not a duration such as '15s', '1m30s' or '2h'")
    return sum(float(num) * _UNIT_SECONDS[unit] for num, unit in _PART.findall(text))
