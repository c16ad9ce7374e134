"""Benchmark: scale-up latency with and without Gitea's workflow_job webhook.

For each path (poll only; webhook plus poll) it commits one workflow, then pushes other
files one at a time, 1 to 3 s apart (each push queues one or more runs of it), until JOBS
runner Jobs exist. Per job it measures the time from "Gitea lists it as queued" (sampled
every 0.1 s) to "its runner Job exists", pairing the k-th queued job with the k-th runner Job
(capacity is counted, not bound), and prints p50/p99 side by side. Deliveries are real: Gitea signs
and posts workflow_job events to the operator's /hooks/gitea on loopback, with the group's
own hook secret. The group polls every POLL (15s by default) on both paths.

Gitea and the cluster are sampled by a thread of their own every 20 ms (pushes never hold
the sampling up). On the webhook path the operator runs with debug logs, and its timing
spans are printed per delivery of a ``queued`` job (``wake_spans``): Gitea's own step from
queueing the job to the delivery, the wake-up limiter, the poller, the refresh request to
Gitea, the work queue, the reconcile up to its create, and the API server's create.

With --plot FILE (needs matplotlib) it also draws queued jobs and runner Jobs over time for
both paths, side by side.

    python -m tests.benchmarks.webhook_latency [--jobs 50] [--poll 15s] [--plot docs/scale-up.png]
        [--paths poll,webhook] [--keep-log DIR]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import shutil
import threading
import time
import uuid
from pathlib import Path
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
    parser.add_argument(
        "--paths", default="poll,webhook", help="which paths to run, comma-separated"
    )
    parser.add_argument("--keep-log", help="copy the operator's log of each path to this folder")
    args = parser.parse_args(argv)

    results: dict[str, dict[str, Any]] = {}
    with Sandbox(harness_node=False) as sandbox:
        common.install(sandbox)
        for path in args.paths.split(","):
            results[path] = run(sandbox, path, args.jobs, args.poll, args.keep_log)
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


def run(
    sandbox: Sandbox, path: str, n: int, poll: str, keep_log: str | None = None
) -> dict[str, Any]:
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
    debug = ("--log-level", "debug") if path == "webhook" else ()
    with common.operator(sandbox, [ns], *debug) as op:
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
        queued_wall: dict[int, float] = {}  # the same, wall clock (the operator's log)
        job_seen: dict[str, float] = {}
        timeline: list[tuple[float, int, int]] = []
        t0 = time.monotonic()
        next_push, pushed = t0, 0
        jobs_path = f"/apis/batch/v1/namespaces/{ns}/jobs"
        stop = threading.Event()

        def sample() -> None:
            """Queued jobs in Gitea and runner Jobs in the cluster, every 20 ms."""
            reader = GiteaAPI(sandbox.gitea_url or "", token=sandbox.gitea_token)
            while not stop.is_set():
                for job in reader.list_jobs("org", org, status="queued"):
                    queued_at.setdefault(int(job["id"]), time.monotonic())
                    queued_wall.setdefault(int(job["id"]), time.time())
                for item in kube.get(jobs_path)["items"]:
                    job_seen.setdefault(item["metadata"]["name"], time.monotonic())
                timeline.append((time.monotonic() - t0, len(queued_at), len(job_seen)))
                time.sleep(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        while len(job_seen) < n and time.monotonic() - t0 < n * 3 + 120:
            now = time.monotonic()
            if pushed < n and now >= next_push:
                workflow = f"name: w{pushed}\non: [push]\njobs:\n  j:\n    runs-on: lat\n"
                gitea.push_workflow(
                    org, "app", f"w{pushed}.yml", workflow + "    steps: [{run: echo}]\n"
                )
                pushed += 1
                next_push = now + random.uniform(1.0, 3.0)  # noqa: S311
            time.sleep(0.05)
        stop.set()
        sampler.join()
        deliveries = common.total(op.metrics(), "gitea_runner_operator_webhook_deliveries_total")
    if keep_log and op.log_path:
        shutil.copy(op.log_path, Path(keep_log) / f"operator-{path}.log")
    spans = wake_spans(op.log_path, queued_wall) if path == "webhook" and op.log_path else {}
    starts = sorted(queued_at.values())
    created = sorted(job_seen.values())
    latencies = [max(0.0, c - q) for q, c in zip(starts, created, strict=False)]
    print(f"{path}: {len(latencies)} jobs measured, {deliveries:.0f} webhook deliveries")
    for name, values in spans.items():
        print(
            f"  {name:<40} p50 {common.percentile(values, 0.5) * 1000:7.1f} ms"
            f"  p99 {common.percentile(values, 0.99) * 1000:7.1f} ms  ({len(values)})"
        )
    return {"latencies": latencies, "most": len(job_seen), "timeline": timeline}


def _at(line: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00")).timestamp()


SPANS = (
    "Gitea: queued -> delivery accepted",
    "delivery -> group woken (wake limiter)",
    "woken -> refresh starts (poller)",
    "refresh request to Gitea",
    "refresh answered -> reconcile starts",
    "reconcile starts -> create sent",
    "create sent -> created (API server)",
    "delivery -> runner Job created",
    "  of which the operator's own steps",
)


def wake_spans(log_path: Path, queued_at: dict[int, float]) -> dict[str, list[float]]:
    """Per Gitea job that a ``queued`` delivery was about, the operator's steps from its debug
    log: delivery accepted -> group woken -> the first woken refresh whose answer listed the
    job starts and ends -> the next reconcile starts -> it sends its creates -> they are
    created. ``queued_at`` (wall clock, the sampler's) adds Gitea's own step before the
    delivery. A job whose first sighting was not a woken refresh (the periodic poll), or
    whose pass created nothing (covered by an earlier create), is counted apart; so is one
    listed by a refresh that started before its delivery (woken by an earlier one): it
    counts in the total from its delivery (0 if its runner Job came first), in no step."""
    lines = []
    for raw in log_path.read_text().splitlines():
        try:
            lines.append(json.loads(raw))
        except ValueError:
            continue
    deliveries = [
        (_at(x), x["job_id"])
        for x in lines
        if x.get("event") == "webhook delivery accepted" and x.get("action") == "queued"
    ]
    woken = sorted(_at(x) for x in lines if x.get("event") == "group woken")
    refreshes = [
        (_at(x) - x["took"], _at(x), set(x.get("new_queued") or ()))
        for x in lines
        if x.get("event") == "observed after a wake-up"
    ]
    reconciles = sorted(
        (_at(x) - x["took"], _at(x)) for x in lines if x.get("event") == "reconciled"
    )
    sent = [_at(x) for x in lines if x.get("event") == "creating runner jobs"]
    created = [_at(x) for x in lines if x.get("event") == "created runner jobs"]
    spans: dict[str, list[float]] = {name: [] for name in SPANS}
    apart = dict.fromkeys(
        (
            "first seen by a periodic poll",
            "its pass created nothing",
            "listed by a refresh that started before it",
        ),
        0,
    )
    for delivered, job_id in deliveries:
        ref = next((r for r in refreshes if job_id in r[2]), None)
        if ref is None:
            apart["first seen by a periodic poll"] += 1
            continue
        rec = next((r for r in reconciles if r[0] >= ref[1]), None)
        send = next((c for c in sent if rec and rec[0] <= c <= rec[1]), None)
        done = next((c for c in created if rec and rec[0] <= c <= rec[1]), None)
        if rec is None or send is None or done is None:
            apart["its pass created nothing"] += 1
            continue
        if job_id in queued_at:
            spans[SPANS[0]].append(max(0.0, delivered - queued_at[job_id]))
        if ref[0] < delivered:
            # Listed by a refresh an earlier delivery woke: nothing waited for this one.
            apart["listed by a refresh that started before it"] += 1
            spans[SPANS[-2]].append(max(0.0, done - delivered))
            continue
        wake = next((w for w in woken if delivered <= w <= ref[0]), ref[0])
        steps = (delivered, wake, max(wake, ref[0]), ref[1], rec[0], send, done)
        for name, a, b in zip(SPANS[1:], steps, steps[1:], strict=False):
            spans[name].append(b - a)
        spans[SPANS[-2]].append(done - delivered)
        # All but Gitea's answer and the API server's create (a wait for a refresh already
        # in flight counts as the operator's: it is the limiter's choice).
        spans[SPANS[-1]].append((done - delivered) - (ref[1] - ref[0]) - (done - send))
    for name, count in apart.items():
        print(f"  deliveries of a queued job {name}: {count}")
    return {k: v for k, v in spans.items() if v}


def plot(results: dict[str, dict[str, Any]], target: str, poll: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib (pip install matplotlib); no picture drawn")
        return
    fig, grid = plt.subplots(1, len(results), figsize=(11, 4), sharey=True, squeeze=False)
    axes = grid[0]
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
