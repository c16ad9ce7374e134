"""What the informer caches hold per runner Job and Pod (objects/slim.py), by tracemalloc:

    python -m tests.benchmarks.cache_footprint [--runners 2000]

Builds ``--runners`` Jobs and Pods shaped as the API server sends a running runner's (each
with its own name, uid, resourceVersion and timestamps), decodes each from JSON as the
watch does, and prints the bytes kept per object three ways: as parsed, slimmed, and
slimmed and shared (the informers' transform). Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import tracemalloc
import uuid
from collections.abc import Callable
from typing import Any

from gitea_runner_operator.objects import slim as slim_module
from gitea_runner_operator.objects.slim import slim_job, slim_pod, strip_managed_fields

GROUP_LABELS = {
    "gitea.bpg.pw/managed-by": "gitea-runner-operator",
    "gitea.bpg.pw/runnergroup-name": "g0001",
    "app": "gitea-runner",
}


def runner_job(i: int) -> dict[str, Any]:
    name = f"g0001-{uuid.uuid4().hex[:5]}-{i}"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name, "namespace": "team-001", "uid": str(uuid.uuid4()),
            "resourceVersion": str(200_000 + i), "generation": 1,
            "creationTimestamp": f"2026-11-25T09:{i % 60:02d}:{i % 59:02d}Z",
            "labels": dict(GROUP_LABELS),
            "annotations": {"gitea.bpg.pw/runner-labels": "ubuntu-latest",
                            "gitea.bpg.pw/took-job": "true"},
        },
        "spec": {"backoffLimit": 0, "template": {"spec": {"containers": [
            {"name": "runner", "image": "gitea-runner:local",
             "env": [{"name": f"E{k}", "value": "v" * 20} for k in range(12)]}]}}},
        "status": {"active": 1, "startTime": "2026-11-25T09:00:00Z",
                   "conditions": [{"type": "Complete", "status": "False"}]},
    }  # fmt: skip


def runner_pod(i: int) -> dict[str, Any]:
    job = f"g0001-{uuid.uuid4().hex[:5]}-{i}"
    at = f"2026-11-25T09:{i % 60:02d}:{i % 59:02d}Z"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job}-{uuid.uuid4().hex[:5]}", "namespace": "team-001",
            "uid": str(uuid.uuid4()), "resourceVersion": str(300_000 + i),
            "creationTimestamp": at,
            "labels": {**GROUP_LABELS, "batch.kubernetes.io/job-name": job, "job-name": job},
        },
        "spec": {"nodeName": "node-1", "containers": [{"name": "runner", "image": "x"}]},
        "status": {
            "phase": "Running", "hostIP": "10.0.0.1", "podIP": "10.1.0.1",
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": at}
                           for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")],
            "containerStatuses": [{
                "name": "runner", "ready": True, "started": True, "restartCount": 0,
                "state": {"running": {"startedAt": at}}, "lastState": {},
                "image": "gitea-runner:local", "imageID": "sha256:" + "a" * 64,
                "containerID": "containerd://" + "b" * 64}],
        },
    }  # fmt: skip


def kept_bytes(raws: list[str], transform: Callable[[dict[str, Any]], Any]) -> int:
    tracemalloc.start()
    kept = [transform(json.loads(raw)) for raw in raws]
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del kept
    return size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runners", type=int, default=2000)
    args = parser.parse_args(argv)
    n = args.runners
    print(f"{n} runner Jobs and {n} runner Pods, bytes kept per object (tracemalloc):")
    print(f"{'':5} {'as parsed':>10} {'slimmed':>10} {'+ shared':>10}")
    totals = [0, 0, 0]
    for kind, make, slim in (("job", runner_job, slim_job), ("pod", runner_pod, slim_pod)):
        raws = [json.dumps(make(i)) for i in range(n)]
        sizes = [
            kept_bytes(raws, strip_managed_fields),
            kept_bytes(raws, _unshared(slim)),
            kept_bytes(raws, slim),
        ]
        totals = [t + s for t, s in zip(totals, sizes, strict=True)]
        print(f"{kind:5} " + " ".join(f"{s / n:>9.0f}B" for s in sizes))
    print(
        f"all {2 * n} objects: "
        + ", ".join(
            f"{label} {t / 2**20:.1f} MiB"
            for label, t in zip(("as parsed", "slimmed", "slimmed and shared"), totals, strict=True)
        )
    )
    return 0


def _unshared(slim: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    """``slim`` with sharing turned off: what slimming alone keeps."""

    def run(obj: dict[str, Any]) -> Any:
        saved, slim_module.shared_obj = slim_module.shared_obj, lambda o: o
        try:
            return slim(obj)
        finally:
            slim_module.shared_obj = saved

    return run


if __name__ == "__main__":
    raise SystemExit(main())
