"""Benchmark: scale-up latency with and without Gitea's workflow_job webhook.

For each path (poll only; webhook plus poll) it commits one workflow, then pushes other
files one at a time, 1 to 3 s apart (each push queues one or more runs of it), until JOBS
runner Jobs exist. Per job it measures the time from "Gitea lists it as queued" (sampled
every 0.1 s) to "its runner Job exists", pairing the k-th queued job with the k-th runner Job
(capacity is counted, not bound), and prints p50/p99 side by side. Deliveries are real: Gitea signs
and posts workflow_job events to the operator's /hooks/gitea on loopback, with the group's
own hook secret. The group polls every POLL (15s by default) on both paths.

With --plot FILE (needs matplotlib) it also draws queued jobs and runner Jobs over time for
both paths, side by side.

    python -m tests.benchmarks.webhook_latency [--jobs 50] [--poll 15s] [--plot docs/scale-up.png]
"""

from __future__ import annotations

import argparse
import random
import time
import uuid
from typing import Any

from tests.benchmarks import common
from tests.support import manifests
from tests.support.testbed import make_secret
from tests.testbed.gitea_api import GiteaAPI
from tests.testbed.sandbox import Sandbox


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--poll", default="15s")
    parser.add_argument("--plot", help="draw the timelines into this PNG (needs matplotlib)")
    args = parser.parse_args(argv)

    results: dict[str, dict[str, Any]] = {}
    with Sandbox(harness_node=False) as sandbox:
        common.install(sandbox)
        for path in ("poll", "webhook"):
            results[path] = run(sandbox, path, args.jobs, args.poll)
    print(f"\n{'path':>8} {'jobs':>5} {'p50':>9} {'p99':>9} {'max':>9} {'most Jobs':>10}")
    for path, r in results.items():
        lat = r["latencies"]
        print(
            f"{path:>8} {len(lat):>5} {common.percentile(lat, 0.5):8.2f}s "
            f"{common.percentile(lat, 0.99):8.2f}s {max(lat):8.2f}s {r['most']:>10}"
        )
    if args.plot:
        plot(results, args.plot, args.poll)
    return 0


def run(sandbox: Sandbox, path: str, n: int, poll: str) -> dict[str, Any]:
    kube = sandbox.kube
    assert kube is not None and sandbox.gitea_url and sandbox.gitea_token
    gitea = GiteaAPI(sandbox.gitea_url, token=sandbox.gitea_token)
    suffix = uuid.uuid4().hex[:6]
    ns = org = f"lat-{path}-{suffix}"
    gitea.create_org(org)
    gitea.create_repo(org, "app")
    common.team(kube, ns, gitea.registration_token("org", owner=org), sandbox.gitea_token)
    hook_secret = uuid.uuid4().hex
    make_secret(kube, ns, "hook", {"secret": hook_secret})
    spec: dict[str, Any] = {"pollInterval": poll, "maxActiveRunners": n + 10}
    if path == "webhook":
        spec["webhook"] = {"secretRef": {"name": "hook", "key": "secret"}}
    with common.operator(sandbox, [ns]) as op:
        manifests.apply(kube, common.group("lat", org, sandbox.gitea_url, ["lat"], **spec), ns)
        if path == "webhook":
            gitea.create_webhook(
                f"http://127.0.0.1:{op.webhook_port}/hooks/gitea", owner=org, secret=hook_secret
            )
        # One workflow, committed once (its own run is the first job); every later push
        # touches another file and runs it once: one queued job per push.
        gitea.push_workflow(
            org, "app", "lat.yml",
            "name: lat\non: [push]\njobs:\n  j:\n    runs-on: lat\n    steps: [{run: echo}]\n",
        )  # fmt: skip
        time.sleep(5)
        queued_at: dict[int, float] = {}
        job_seen: dict[str, float] = {}
        timeline: list[tuple[float, int, int]] = []
        t0 = time.monotonic()
        next_push, pushed = t0, 0
        jobs_path = f"/apis/batch/v1/namespaces/{ns}/jobs"
        while len(job_seen) < n and time.monotonic() - t0 < n * 3 + 120:
            now = time.monotonic()
            if pushed < n and now >= next_push:
                workflow = f"name: w{pushed}\non: [push]\njobs:\n  j:\n    runs-on: lat\n"
                gitea.push_workflow(
                    org, "app", f"w{pushed}.yml", workflow + "    steps: [{run: echo}]\n"
                )
                pushed += 1
                next_push = now + random.uniform(1.0, 3.0)  # noqa: S311
            for job in gitea.list_jobs("org", org, status="queued"):
                queued_at.setdefault(int(job["id"]), time.monotonic())
            for item in kube.get(jobs_path)["items"]:
                job_seen.setdefault(item["metadata"]["name"], time.monotonic())
            timeline.append((time.monotonic() - t0, len(queued_at), len(job_seen)))
            time.sleep(0.1)
        deliveries = common.total(op.metrics(), "gitea_runner_operator_webhook_deliveries_total")
    starts = sorted(queued_at.values())
    created = sorted(job_seen.values())
    latencies = [max(0.0, c - q) for q, c in zip(starts, created, strict=False)]
    print(f"{path}: {len(latencies)} jobs measured, {deliveries:.0f} webhook deliveries")
    return {"latencies": latencies, "most": len(job_seen), "timeline": timeline}


def plot(results: dict[str, dict[str, Any]], target: str, poll: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib (pip install matplotlib); no picture drawn")
        return
    fig, axes = plt.subplots(1, len(results), figsize=(11, 4), sharey=True)
    for ax, (path, r) in zip(axes, results.items(), strict=True):
        t = [p[0] for p in r["timeline"]]
        ax.step(t, [p[1] for p in r["timeline"]], where="post", label="jobs queued in Gitea")
        ax.step(t, [p[2] for p in r["timeline"]], where="post", label="runner Jobs")
        p50 = common.percentile(r["latencies"], 0.5)
        ax.set_title(f"{path} (pollInterval {poll}): p50 {p50:.2f}s")
        ax.set_xlabel("seconds")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("count (cumulative)")
    axes[0].legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    print(f"drew {target}")


if __name__ == "__main__":
    raise SystemExit(main())
