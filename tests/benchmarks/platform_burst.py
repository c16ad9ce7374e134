"""Benchmark: the platform's burst of issue 45 on the testbed, with the operator as a process:
one org group of the platform team and 150 repo groups of other teams on one Gitea (the
fake, tests/support/fake_gitea.py), 300 jobs queued at once across the repositories.

Prints what a platform would look at: whether capacity stayed exact (runner Jobs created
against jobs, and how many never ran a job), how long until every job had its runner Job and
ran, and the reconcile passes' ``reconcile_duration_seconds`` over the burst (p50, p99 and
the largest bucket reached, from the operator's own histogram, as Prometheus would compute
them), and the runner creates and marks the groups' writers sent after those passes
(``runner_writes_duration_seconds``, by kind). It asserts nothing.

    python -m tests.benchmarks.platform_burst [--repos 150] [--jobs 300] [--namespaces 15]
        [--poll-interval 10s] [--rounds 1] [--operator-arg=--kube-write-qps=1000 ...]
"""

from __future__ import annotations

import argparse
import shutil
import time
import uuid
from pathlib import Path

from tests.benchmarks import common
from tests.benchmarks.replicas import RunnerJobs, wait
from tests.support import manifests
from tests.support.fake_gitea import GroupScope, SimulatedGitea
from tests.testbed.sandbox import Sandbox

LABEL = "ubuntu-latest"
DURATION = "gitea_runner_operator_reconcile_duration_seconds"
WRITES = "gitea_runner_operator_runner_writes_duration_seconds"
Metrics = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def delta(after: Metrics, before: Metrics, histogram: str = DURATION) -> Metrics:
    """The histogram's buckets of what happened between two scrapes."""
    name = f"{histogram}_bucket"
    return {k: v - before.get(k, 0.0) for k, v in after.items() if k[0] == name}


def writes_line(after: Metrics, before: Metrics) -> str:
    """The group writers' creates and marks, sent after the passes that decided them."""
    buckets = delta(after, before, WRITES)
    parts = []
    for kind in ("create", "mark"):
        mine = {k: v for k, v in buckets.items() if dict(k[1]).get("kind") == kind}
        p50 = common.histogram_quantile(mine, WRITES, 0.5) or 0.0
        p99 = common.histogram_quantile(mine, WRITES, 0.99) or 0.0
        parts.append(f"{kind} {passes(mine):.0f}, p50 {p50:.3f} s, p99 {p99:.3f} s")
    return "  runner writes after the pass (runner_writes_duration_seconds): " + "; ".join(parts)


def largest_bucket(buckets: Metrics) -> float | None:
    """The smallest bound under which every pass of the burst fell."""
    summed: dict[float, float] = {}
    for (_, labels), value in buckets.items():
        le = float(dict(labels)["le"])
        summed[le] = summed.get(le, 0.0) + value
    if not summed:
        return None
    count = summed[max(summed)]
    return min(le for le, n in summed.items() if n >= count)


def passes(buckets: Metrics) -> float:
    return sum(v for (_, labels), v in buckets.items() if dict(labels)["le"] == "+Inf")


def burst(fake: SimulatedGitea, jobs: RunnerJobs, owner: str, repos: int, count: int) -> None:
    start = time.monotonic()
    ids = [fake.queue(owner, f"app{i % repos:03d}", (LABEL,))[0] for i in range(count)]
    made = wait(lambda: jobs.since(start) >= count, 300)
    ran = wait(lambda: all(fake.jobs[i].started_at is not None for i in ids), 300)
    time.sleep(5)  # a runner Job too many would show by now
    created = jobs.made_since(start)
    took = {pod for pod, marks in list(fake.trace.items()) if "took" in marks}
    idle = sum(1 for s in created if not any(pod.startswith(f"{s.name}-") for pod in took))
    print(
        f"  {count} jobs: {len(created)} runner Jobs created ({idle} ran no job); every job had "
        f"its runner Job after {made if made is None else round(made, 1)} s, ran after "
        f"{ran if ran is None else round(ran, 1)} s",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repos", type=int, default=150)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--namespaces", type=int, default=15)
    parser.add_argument("--poll-interval", default="10s")
    parser.add_argument("--job-seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=1, help="bursts, one after another")
    parser.add_argument(
        "--operator-arg",
        action="append",
        default=[],
        help="a flag for the operator (repeat), e.g. --operator-arg=--kube-write-qps=1000",
    )
    parser.add_argument("--logs", help="copy the operator's log into this directory")
    args = parser.parse_args(argv)

    owner = f"acme-{uuid.uuid4().hex[:4]}"
    fake = SimulatedGitea(job_seconds=args.job_seconds)
    namespaces = ["platform", *(f"{owner}-team-{i:02d}" for i in range(args.namespaces))]
    with Sandbox(gitea=False, harness_node=False) as sandbox:
        kube = common.install(sandbox)
        fake.start(kube)
        jobs = RunnerJobs(kube).__enter__()
        try:
            for ns in namespaces:
                common.team(kube, ns, "registration-token", "api-token")
            fake.group("platform", "org", GroupScope(owner, None, (LABEL,)))
            body = common.group("org", owner, fake.url, [LABEL], pollInterval=args.poll_interval)
            body["spec"]["maxActiveRunners"] = 50
            manifests.apply(kube, body, namespace="platform")
            for r in range(args.repos):
                ns, repo = namespaces[1 + r % args.namespaces], f"app{r:03d}"
                fake.group(ns, f"ci-{repo}", GroupScope(owner, repo, (LABEL,)))
                body = common.group(
                    f"ci-{repo}", owner, fake.url, [LABEL], pollInterval=args.poll_interval
                )
                body["spec"] |= {"scope": "repo", "repo": repo}
                manifests.apply(kube, body, namespace=ns)
            print(f"1 org group and {args.repos} repo groups on one Gitea", flush=True)
            with common.operator(sandbox, namespaces, *args.operator_arg) as op:
                time.sleep(40)  # every group admitted and polled once
                for n in range(args.rounds):
                    before = op.metrics()
                    burst(fake, jobs, owner, args.repos, args.jobs)
                    after = op.metrics()
                    buckets = delta(after, before)
                    p50 = common.histogram_quantile(buckets, DURATION, 0.5)
                    p99 = common.histogram_quantile(buckets, DURATION, 0.99)
                    print(
                        f"  burst {n + 1}: {passes(buckets):.0f} reconcile passes, "
                        f"reconcile_duration_seconds p50 {p50 or 0:.3f} s, p99 {p99 or 0:.3f} s, "
                        f"every pass under the {largest_bucket(buckets)} s bucket; "
                        f"RSS {op.rss_mb():.0f} MB, load {common_load():.1f}",
                        flush=True,
                    )
                    print(writes_line(after, before), flush=True)
                    wait(lambda: fake.count("in_progress") == 0, 300)
                if args.logs and op.log_path is not None:
                    Path(args.logs).mkdir(parents=True, exist_ok=True)
                    shutil.copy(op.log_path, args.logs)
        finally:
            jobs.__exit__()
            fake.stop()
    return 0


def common_load() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


if __name__ == "__main__":
    raise SystemExit(main())
