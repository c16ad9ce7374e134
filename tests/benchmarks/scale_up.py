"""Benchmark: how fast queued Gitea jobs get runner Jobs, and whether capacity stays exact.

Starts the testbed, the operator (as a subprocess, with its ServiceAccount), pushes a
workflow with N jobs, and prints, for each pollInterval asked for:

- time from "Gitea lists the N jobs as queued" to the first and to the N-th runner Job;
- the most runner Jobs seen at any moment (exact capacity means it never exceeds N).

kwok runs the runner Pods (they never register), so this measures the operator's reaction,
not image pulls. Figures vary with machine load: run it a few times.

    python -m tests.benchmarks.scale_up [--jobs 10] [--intervals 5s,15s]
"""

from __future__ import annotations

import argparse
import time
import uuid

from tests.benchmarks.common import BENCH_TOKEN_SECONDS
from tests.support import manifests
from tests.support.launcher import OPERATOR_NS, OPERATOR_SA, launch
from tests.support.testbed import allow_secrets
from tests.testbed.gitea_api import GiteaAPI
from tests.testbed.sandbox import Sandbox


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--intervals", default="5s,15s")
    args = parser.parse_args(argv)

    with Sandbox(harness_node=False) as sandbox:
        kube = sandbox.kube
        assert kube is not None and sandbox.gitea_url and sandbox.gitea_token
        for name in ("crd.yaml", "namespace.yaml", "serviceaccount.yaml", "rbac.yaml"):
            for obj in manifests.load(name):
                manifests.apply(kube, obj)
        time.sleep(2)
        gitea = GiteaAPI(sandbox.gitea_url, token=sandbox.gitea_token)
        print(
            f"{'pollInterval':>12} {'jobs':>5} {'first Job':>10} {'all Jobs':>10} {'max Jobs':>9}"
        )
        for interval in args.intervals.split(","):
            run(sandbox, kube, gitea, interval, args.jobs)
    return 0


def run(sandbox: Sandbox, kube: object, gitea: GiteaAPI, interval: str, n: int) -> None:
    suffix = uuid.uuid4().hex[:6]
    ns, org = f"bench-{suffix}", f"bench-{suffix}"
    manifests.apply(kube, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})  # type: ignore[arg-type]
    allow_secrets(kube, ns)  # type: ignore[arg-type]
    gitea.create_org(org)
    gitea.create_repo(org, "app")
    manifests.apply(
        kube,  # type: ignore[arg-type]
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "tokens", "labels": {"gitea.bpg.pw/credentials": "true"}},
            "stringData": {
                "registration": gitea.registration_token("org", owner=org),
                "api": sandbox.gitea_token,
            },
        },
        namespace=ns,
    )
    token = kube.create_token(  # type: ignore[attr-defined]
        OPERATOR_NS, OPERATOR_SA, seconds=BENCH_TOKEN_SECONDS
    )
    operator = launch(
        sandbox.kubeconfig_for_token(token),
        [ns],
        log_path=sandbox.workdir / f"operator-{suffix}.log",
        leader_election_namespace=None,
    )
    try:
        manifests.apply(
            kube,  # type: ignore[arg-type]
            {
                "apiVersion": "gitea.bpg.pw/v1alpha1",
                "kind": "RunnerGroup",
                "metadata": {"name": "bench"},
                "spec": {
                    "scope": "org", "org": org, "gitea": {"url": sandbox.gitea_url},
                    "labels": ["bench"], "maxActiveRunners": n * 2, "pollInterval": interval,
                    "image": "kwok.invalid/act_runner:complete-after-3600s",
                    "registrationToken": {"secretRef": {"name": "tokens", "key": "registration"}},
                    "authToken": {"secretRef": {"name": "tokens", "key": "api"}},
                },
            },
            namespace=ns,
        )  # fmt: skip
        time.sleep(3)  # let the operator settle on an empty queue
        jobs = "".join(
            f"  j{i}:\n    runs-on: bench\n    steps: [{{run: echo {i}}}]\n" for i in range(n)
        )
        gitea.push_workflow(org, "app", "bench.yml", f"name: bench\non: [push]\njobs:\n{jobs}")
        while len(gitea.list_jobs("org", org, status="queued")) < n:
            time.sleep(0.05)
        queued_at = time.monotonic()
        first = last = None
        most = 0
        path = f"/apis/batch/v1/namespaces/{ns}/jobs"
        deadline = queued_at + 120
        while time.monotonic() < deadline:
            count = len(kube.get(path)["items"])  # type: ignore[attr-defined]
            most = max(most, count)
            now = time.monotonic()
            if count and first is None:
                first = now - queued_at
            if count >= n and last is None:
                last = now
            if last is not None and now - last > 20:  # watch for over-provisioning
                break
            time.sleep(0.1)
        all_jobs = f"{last - queued_at:9.2f}s" if last else "   never"
        first_job = f"{first:9.2f}s" if first is not None else "   never"
        print(f"{interval:>12} {n:>5} {first_job:>10} {all_jobs:>10} {most:>9}", flush=True)
    finally:
        operator.stop(timeout=30)


if __name__ == "__main__":
    raise SystemExit(main())
