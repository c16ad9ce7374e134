"""Golden files pin the objects a group renders: the runner Job in each mode (with and without
``spec.cache``, and a Forgejo runner's), and the cache server's Deployment, Service, PVC and
Secret. A change to any of them shows up as a diff of a file a reviewer reads, not only as the
few fields the other tests assert.

After an intended change: ``GRO_UPDATE_GOLDEN=1 pytest tests/unit/objects/test_golden_objects.py``,
then read the diff of ``tests/unit/objects/golden/`` before committing it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gitea_runner_operator.api.runnergroup import parse_spec
from gitea_runner_operator.objects.forgejo_job import render_forgejo_job
from gitea_runner_operator.objects.job_template import render_runner_job
from gitea_runner_operator.objects.jobcache_server import (
    render_deployment,
    render_pvc,
    render_secret,
    render_service,
)
from tests.support.builders import VALID

GOLDEN = Path(__file__).parent / "golden"
OWNED = {"group_name": "ci", "namespace": "team-a", "group_uid": "uid-1"}
JOB = "ci-0123abcd-bcdfg"


def _spec(mode: str, cache: bool = False, forge: str = "gitea") -> Any:
    raw: dict[str, Any] = {**VALID, "mode": mode}
    raw["labels"] = ["linux"] if mode == "host" else ["linux:docker://node:20-bookworm"]
    if cache:
        raw["cache"] = {"enabled": True}
    if forge == "forgejo":
        raw["gitea"] = {"url": "https://forgejo.example/", "flavor": "forgejo"}
    return parse_spec(raw)


def _objects() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for mode in ("dind-rootless", "dind", "host"):
        for cache in (False, True):
            name = f"runner-job-{mode}{'-cache' if cache else ''}"
            out[name] = render_runner_job(spec=_spec(mode, cache), job_name=JOB, **OWNED)
    out["runner-job-forgejo-dind"] = render_forgejo_job(
        spec=_spec("dind", forge="forgejo"), job_name=JOB, ttl_seconds_after_finished=600, **OWNED
    )
    spec = _spec("dind", cache=True)
    out["jobcache-deployment"] = render_deployment(spec=spec, **OWNED)
    out["jobcache-service"] = render_service(**OWNED)
    out["jobcache-pvc"] = render_pvc(spec=spec, **OWNED)
    out["jobcache-secret"] = render_secret(values={"external-secret": "0" * 64}, **OWNED)
    return out


OBJECTS = _objects()


@pytest.mark.parametrize("name", sorted(OBJECTS))
def test_the_rendered_object_is_the_golden_one(name: str) -> None:
    path = GOLDEN / f"{name}.json"
    text = json.dumps(OBJECTS[name], indent=2, sort_keys=True) + "\n"
    if os.environ.get("GRO_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"no golden file {path.name}: run with GRO_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} changed: see the module docstring"


def test_every_golden_file_is_rendered() -> None:
    assert {p.stem for p in GOLDEN.glob("*.json")} == set(OBJECTS)
