"""What the tests share: fakes, builders, the operator launcher and the testbed helpers live
here (or in a conftest.py), never in a test module, so that no test imports another's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# The repository's root: test modules sit at different depths, so none counts parents.
REPO_ROOT = Path(__file__).resolve().parents[2]
MONITORING = REPO_ROOT / "manifests" / "monitoring"
CHART = REPO_ROOT / "charts" / "gitea-runner-operator"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies ``merge-patch+json``."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out
