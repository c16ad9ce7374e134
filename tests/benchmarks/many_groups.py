"""Benchmark: one operator replica with many RunnerGroups and thousands of queued jobs.

Starts the testbed, creates GROUPS RunnerGroups across NAMESPACES namespaces (one org, one API
token, so groups on the same scope share one Gitea query per poll; each group has its own
label), pushes workflows with JOBS queued jobs spread over the groups' labels, and prints:

- time from "Gitea lists every job as queued" to "every runner Job exists" (and the most
  runner Jobs ever seen: exactness means never more than JOBS);
- at steady state over WINDOW seconds: operator RSS, CPU (cores), reconcile p50/p99 (from
  its own /metrics), its Kubernetes writes/s and Gitea requests/s.

kwok plays the kubelet; the runner Pods never register, so this measures the operator.

    python -m tests.benchmarks.many_groups [--groups 1000] [--namespaces 100] [--jobs 2000]
"""

from __future__ import annotations

import argparse
import time
import uuid

from tests.benchmarks import common
from tests.support import manifests
from tests.testbed.gitea_api import GiteaAPI
from tests.testbed.sandbox import Sandbox

SELECTOR = "gitea.bpg.pw/managed-by=gitea-runner-operator"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--namespaces", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--window", type=float, default=120.0, help="steady-state seconds")
    parser.add_argument("--poll-interval", default="15s")
    args = parser.parse_args(argv)

    with Sandbox(harness_node=False) as sandbox:
        kube = common.install(sandbox)
        assert sandbox.gitea_url and sandbox.gitea_token
        gitea = GiteaAPI(sandbox.gitea_url, token=sandbox.gitea_token)
        org = f"scale-{uuid.uuid4().hex[:6]}"
        gitea.create_org(org)
        gitea.create_repo(org, "app")
        registration = gitea.registration_token("org", owner=org)
        namespaces = [f"{org}-{i:03d}" for i in range(args.namespaces)]
        for ns in namespaces:
            common.team(kube, ns, registration, sandbox.gitea_token)
        started = time.monotonic()
        with common.operator(sandbox, namespaces) as op:
            for i in range(args.groups):
                manifests.apply(
                    kube,
                    common.group(f"g{i:04d}", org, sandbox.gitea_url, [f"g{i:04d}"],
                                 pollInterval=args.poll_interval),
                    namespace=namespaces[i % len(namespaces)],
                )  # fmt: skip
            print(f"created {args.groups} groups in {time.monotonic() - started:.1f}s")
            time.sleep(20)  # settle: every group polled once on an empty queue

            per_workflow = 250
            for w in range(0, args.jobs, per_workflow):
                jobs = "".join(
                    f"  j{k}:\n    runs-on: g{k % args.groups:04d}\n    steps: [{{run: echo}}]\n"
                    for k in range(w, min(args.jobs, w + per_workflow))
                )
                gitea.push_workflow(
                    org, "app", f"w{w}.yml", f"name: w{w}\non: [push]\njobs:\n{jobs}"
                )
            while (queued := len(gitea.list_jobs("org", org, status="queued"))) < args.jobs:
                time.sleep(0.5)
            if queued != args.jobs:
                print(f"warning: Gitea queued {queued} jobs, not {args.jobs}")
            queued_at = time.monotonic()
            most, done_at = 0, None
            while time.monotonic() - queued_at < 600:
                count = len(kube.get("/apis/batch/v1/jobs", labelSelector=SELECTOR)["items"])
                most = max(most, count)
                if count >= args.jobs and done_at is None:
                    done_at = time.monotonic()
                    break
                time.sleep(1)
            all_jobs = f"{done_at - queued_at:.1f}s" if done_at else "not within 600s"
            print(f"queued jobs: {args.jobs}; every runner Job after {all_jobs}")

            before, cpu0, t0 = op.metrics(), op.cpu_seconds(), time.monotonic()
            while time.monotonic() - t0 < args.window:
                most = max(
                    most, len(kube.get("/apis/batch/v1/jobs", labelSelector=SELECTOR)["items"])
                )
                time.sleep(5)
            after, cpu1, elapsed = op.metrics(), op.cpu_seconds(), time.monotonic() - t0

            def rate(name: str) -> float:
                return (common.total(after, name) - common.total(before, name)) / elapsed

            p50 = common.histogram_quantile(
                after, "gitea_runner_operator_reconcile_duration_seconds", 0.5
            )
            p99 = common.histogram_quantile(
                after, "gitea_runner_operator_reconcile_duration_seconds", 0.99
            )
            queued_now = len(gitea.list_jobs("org", org, status="queued"))
            print(f"most runner Jobs ever seen: {most} (queued jobs now: {queued_now})")
            print(f"steady state over {elapsed:.0f}s with {args.groups} groups:")
            print(f"  operator RSS: {op.rss_mb():.0f} MB")
            print(f"  operator CPU: {(cpu1 - cpu0) / elapsed:.3f} cores")
            print(f"  reconcile p50 / p99: {_ms(p50)} / {_ms(p99)}")
            print(f"  Kubernetes writes/s: {rate('gitea_runner_operator_kube_writes_total'):.2f}")
            print(f"  Gitea requests/s: {rate('gitea_runner_operator_gitea_requests_total'):.2f}")
            reconciles = rate("gitea_runner_operator_reconcile_duration_seconds_count")
            print(f"  reconciles/s: {reconciles:.1f}")
    return 0


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.1f} ms"


if __name__ == "__main__":
    raise SystemExit(main())
