"""Benchmark: how fast a job starts in each runner mode, on the testbed's real node (issue 43).

Per mode and case it pushes a workflow of one job whose first step prints the node's clock,
and measures from "Gitea lists the job as queued" (sampled every 0.1 s) to "its first step
runs" (the kernel's clock since boot, /proc/uptime, which the runner Pod on this machine
shares). Cases:

- ``cold``: no runner exists; the operator creates one for the job (a new Pod: sandbox, init
  containers, the mode's Docker daemon, registration, the job's container);
- ``warm``: ``minIdleRunners: 1`` keeps an idle runner registered; the job goes to it.

Images are on the node already (imported: there is no registry here), so every case is the
"image cached" one; what an uncached start adds is the pull of the runner's (and the mode's
sidecar's) image, which the node's import times printed at the end bound from below (unpack
without transfer). Run explicitly, never by the default suite (the file name is no test's):

    GRO_STARTUP_ROUNDS=3 GRO_STARTUP_PLOT=docs/mode-startup.png \
        python -m pytest tests/real_node/bench_mode_startup.py -p no:xdist -s

Figures, not assertions: it prints a table and, with ``--startup-plot``, draws one.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.real_node import (
    DIND_CONFIG,
    DIND_SIDECAR,
    LOCAL,
    ROOTLESS_CONFIG,
    USERNS_DAEMON,
    Real,
    on_real_node,
    runner_config,
)
from tests.support.testbed import wait_until
from tests.testbed import images
from tests.testbed.kube import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.real_node]

MODES = ("host", "dind", "dind-rootless", "dind-userns")


def _spec(real: Real, mode: str, label: str) -> dict[str, Any]:
    docker = [f"{label}:docker://{LOCAL}{images.BUSYBOX}"]
    if mode == "host":
        return {"labels": [label], "image": LOCAL + images.RUNNER, "template": on_real_node()}
    config = ROOTLESS_CONFIG if mode == "dind-rootless" else DIND_CONFIG
    spec: dict[str, Any] = {
        "labels": docker,
        "image": LOCAL + (images.ROOTLESS if mode == "dind-rootless" else images.RUNNER),
        "runnerConfig": runner_config(real, f"{label}-config", config),
    }
    init = {"dind": [DIND_SIDECAR], "dind-userns": [USERNS_DAEMON]}.get(mode)
    spec["template"] = on_real_node(init=init)
    return spec


def _workflow(job: str, label: str, mode: str) -> str:
    image = "docker.io/local/busybox:1.35"
    container = "" if mode == "host" else f"    container:\n      image: {image}\n"
    return f"""\
name: startup-{job}
on: [push]
jobs:
  {job}:
    runs-on: {label}
{container}    steps:
      - shell: sh
        run: echo "FIRST STEP AT $(cut -d' ' -f1 /proc/uptime)"
"""


def _one_job(real: Real, label: str, mode: str) -> float:
    """Push one job; seconds from its first sighting as queued to its first step."""
    job = f"s{uuid.uuid4().hex[:8]}"
    # one workflow file, rewritten: a push runs every workflow of the repository
    real.push("startup.yml", _workflow(job, label, mode))
    seen = wait_for(lambda: job in real.jobs() and _uptime(), timeout=120, interval=0.1,
                    what="the job listed")  # fmt: skip
    done = real.wait_done({job}, timeout=420)
    assert done == {job: "success"}, real.pods_report()
    lines = [ln for ln in real.job_log(job).splitlines() if re.search(r"FIRST STEP AT \d", ln)]
    return float(lines[0].split("FIRST STEP AT ")[1].split()[0]) - float(seen)


def _uptime() -> float:
    """The kernel's clock since boot, 10 ms steps: the same for this process and every
    container on the node (busybox's date has no sub-second format)."""
    return float(Path("/proc/uptime").read_text().split()[0])


def test_startup_by_mode(real, real_node, request):
    rounds = int(os.environ.get("GRO_STARTUP_ROUNDS") or 3)
    real.kube.patch(
        f"/api/v1/namespaces/{real.ns}",
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}},
    )
    results: dict[str, dict[str, list[float]]] = {}
    for mode in MODES:
        label = f"gro-start-{mode}"
        name = f"start-{mode}"
        spec = _spec(real, mode, label)
        results[mode] = {"cold": [], "warm": []}
        # a runner made for a job another took idles out in a minute, not ten
        spec["idleTimeout"] = "1m"
        real.group(name, mode=mode, maxActiveRunners=2, **spec)
        for _ in range(rounds):
            # each job on a fresh workflow run; the previous runner has gone
            wait_until(lambda n=name: not _live_pods(real, n), timeout=180, what="no runner")
            results[mode]["cold"].append(_one_job(real, label, mode))
        real.group(name, mode=mode, maxActiveRunners=2, minIdleRunners=1, **spec)
        for _ in range(rounds):
            wait_until(lambda lb=label: _idle_runner(real, lb), timeout=300, what="a warm runner")
            time.sleep(2)
            results[mode]["warm"].append(_one_job(real, label, mode))
        real.group(name, mode=mode, maxActiveRunners=2, minIdleRunners=0, **spec)
        print(f"\n{mode}: {json.dumps(results[mode])}", flush=True)
    imports = {k: v for k, v in real_node.timings.items() if k.startswith("import ")}
    _report(results, imports)
    plot = os.environ.get("GRO_STARTUP_PLOT")
    if plot:
        _plot(results, Path(plot))


def _live_pods(real: Real, group: str) -> list[dict[str, Any]]:
    live = ("Pending", "Running")
    return [p for p in real.pods(group) if (p.get("status") or {}).get("phase") in live]


def _idle_runner(real: Real, label: str) -> bool:
    """A runner of the group online and not busy (the group's scope is the organisation)."""
    runners = real.gitea.list_runners("org", real.target.org)
    return any(
        r.get("status") == "online"
        and not r.get("busy")
        and label in {lb.get("name") for lb in r.get("labels") or []}
        for r in runners
    )


def _report(results: dict[str, dict[str, list[float]]], imports: dict[str, float]) -> None:
    print(f"\n{'mode':>14} {'case':>5} {'n':>3} {'median':>8} {'min':>7} {'max':>7}")
    for mode, cases in results.items():
        for case, values in cases.items():
            if values:
                print(
                    f"{mode:>14} {case:>5} {len(values):>3} {statistics.median(values):>7.1f}s "
                    f"{min(values):>6.1f}s {max(values):>6.1f}s"
                )
    print("\nimage import on the node (unpack, no transfer):")
    for name, seconds in imports.items():
        print(f"  {name}: {seconds} s")


def _plot(results: dict[str, dict[str, list[float]]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    modes = list(results)
    for offset, case in ((-0.15, "cold"), (0.15, "warm")):
        for i, mode in enumerate(modes):
            values = results[mode][case]
            ax.scatter([i + offset] * len(values), values, s=18, label=case if i == 0 else None,
                       color="tab:blue" if case == "cold" else "tab:orange")  # fmt: skip
            if values:
                ax.hlines(statistics.median(values), i + offset - 0.1, i + offset + 0.1,
                          color="black")  # fmt: skip
    ax.set_xticks(range(len(modes)), modes)
    ax.set_ylabel("queued -> first step runs (s)")
    ax.set_title("Job start by runner mode, real node (images on the node)")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"plot: {out}")
