"""Benchmark (issue 47): what 1,000 quiet groups cost Gitea and the operator, without webhooks,
with working webhooks, and with webhooks that lose one delivery in ten; and what it costs a job.

Three runs, each with its own operator process and ``--groups`` fresh repo groups (one
repository each, in ``--namespaces`` namespaces) on the testbed's control plane and the fake
Gitea (fake_gitea_hooks.py: hooks and signed ``workflow_job`` deliveries):

- ``none``: no ``spec.webhook``; every group polls at ``spec.pollInterval`` (15s), as before.
- ``hooks``: each group's own managed hook (``spec.webhook.manageHook``, ``pollInterval``
  5m). To give each group its first evidence, each hook gets one delivery about a job of
  another label in its repository (as another team's jobs in the scope would), which wakes
  nobody.
- ``lossy``: the same, but the fake loses every tenth delivery.

Per run: Gitea requests/s (everything the fake served) and operator CPU over ``--window``
seconds of quiet (``--window-none`` for ``none``); then ``--jobs`` jobs, one every
``--every`` seconds, each in another group: queued -> runner Job p50/p99/max, and the
longest wait of a job whose delivery was lost. Runners register and finish their job
(``job_seconds`` 5), so groups go quiet again. Prints the figures; ``--plot`` draws them.

    python -m tests.benchmarks.quiet_groups [--groups 1000] [--window 620] [--plot FILE]
        [--runs none,hooks,lossy]
"""

from __future__ import annotations

import argparse
import random
import time
import uuid
from typing import Any

from tests.benchmarks import common
from tests.support import manifests
from tests.support.fake_gitea import GroupScope
from tests.support.fake_gitea_hooks import HookedGitea, until
from tests.support.launcher import free_port
from tests.support.testbed import make_secret
from tests.testbed.kube import KubeClient
from tests.testbed.sandbox import Sandbox

SELECTOR = "gitea.bpg.pw/managed-by=gitea-runner-operator"
GROUP_LABEL = "gitea.bpg.pw/runnergroup-name"
LABEL = "quiet"
IMAGE = "kwok.invalid/act_runner:complete-after-3600s"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--groups", type=int, default=1000)
    p.add_argument("--namespaces", type=int, default=50)
    p.add_argument("--window", type=float, default=620.0, help="quiet seconds, with hooks")
    p.add_argument("--window-none", type=float, default=120.0, help="quiet seconds, none")
    p.add_argument("--jobs", type=int, default=40)
    p.add_argument("--every", type=float, default=2.0)
    p.add_argument("--runs", default="none,hooks,lossy")
    p.add_argument("--plot", help="draw the figures into this PNG (matplotlib)")
    args = p.parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    with Sandbox(gitea=False, harness_node=False) as sandbox:
        kube = common.install(sandbox)
        for run in args.runs.split(","):
            results[run] = one_run(sandbox, kube, run, args)
            print_run(run, results[run], flush=True)
    print("\nrun      groups  Gitea req/s  CPU cores  p50 s   p99 s   max s  lost: longest s")
    for run, r in results.items():
        print_row(run, r)
    if args.plot:
        plot(results, args.plot)
    return 0


def one_run(
    sandbox: Sandbox, kube: KubeClient, run: str, args: argparse.Namespace
) -> dict[str, Any]:
    owner = f"q{run[0]}-{uuid.uuid4().hex[:4]}"
    fake = HookedGitea(job_seconds=5, start_delay=1, drop_every=10 if run == "lossy" else 0)
    fake.start(kube)
    hooked = run != "none"
    namespaces = [f"{owner}-{i:02d}" for i in range(args.namespaces)]
    port = free_port()
    extra = ["--webhook-port", str(port), "--webhook-url", f"http://127.0.0.1:{port}/hooks/gitea"]
    groups: list[tuple[str, str]] = []
    try:
        for ns in namespaces:
            common.team(kube, ns, "registration-token", "api-token")
            make_secret(kube, ns, "hook", {"secret": f"hook-secret-{ns}"})
        with common.operator(sandbox, namespaces, *extra) as op:
            for i in range(args.groups):
                ns, name = namespaces[i % len(namespaces)], f"g{i:04d}"
                fake.group(ns, name, GroupScope(owner, name, (LABEL,)))
                body = common.group(name, owner, fake.url, [LABEL], image=IMAGE)
                body["spec"] |= {"scope": "repo", "repo": name, "pollInterval": "15s"}
                if hooked:
                    body["spec"]["webhook"] = {
                        "secretRef": {"name": "hook", "key": "secret"},
                        "manageHook": True,
                        "pollInterval": "5m",
                    }
                manifests.apply(kube, body, namespace=ns)
                groups.append((ns, name))
            if hooked:  # every group's hook made, then each hook's first delivery
                until(lambda: len(fake.hooks) >= args.groups, 180, 1.0)
                time.sleep(5)
                for _, name in groups:
                    fake.deliver(owner, name, ("another-team",), 0, "completed")
                until(lambda: fake.sent >= args.groups, 30)
            time.sleep(30 if hooked else 20)  # every group polled, and asleep
            window = args.window if hooked else args.window_none
            requests0, cpu0, t0 = fake.requests, op.cpu_seconds(), time.monotonic()
            time.sleep(window)
            elapsed = time.monotonic() - t0
            rate = (fake.requests - requests0) / elapsed
            cpu = (op.cpu_seconds() - cpu0) / elapsed
            reasons = cadence_groups(op)
            waits, lost, most = latencies(kube, fake, owner, groups, args)
            return {
                "groups": args.groups,
                "requests": rate,
                "cpu": cpu,
                "waits": waits,
                "lost": lost,
                "most": most,
                "reasons": reasons,
                "after": cadence_groups(op),
                "window": elapsed,
                "failed": fake.failed,
                "hooks": len(fake.hooks),
            }
    finally:
        fake.stop()


def latencies(
    kube: KubeClient,
    fake: HookedGitea,
    owner: str,
    groups: list[tuple[str, str]],
    args: argparse.Namespace,
) -> tuple[list[float], list[float], int]:
    """Queue ``--jobs`` jobs in distinct random groups; per job, seconds until a runner Job of
    its group exists; those of the jobs whose delivery was lost; and the most runner Jobs any
    of those groups had (exactness: 1), counted 20 s after the last job got its own."""
    rng = random.Random(47)  # noqa: S311
    chosen = rng.sample(groups, args.jobs)
    pending: dict[tuple[str, str], tuple[int, float]] = {}
    waits: dict[int, float] = {}
    deadline = time.monotonic() + args.jobs * args.every + 900
    next_queue, i = time.monotonic(), 0
    while (i < len(chosen) or pending) and time.monotonic() < deadline:
        now = time.monotonic()
        if i < len(chosen) and now >= next_queue:
            ns, name = chosen[i]
            (job_id,) = fake.queue(owner, name, (LABEL,), 1)
            pending[(ns, name)] = (job_id, time.monotonic())
            i, next_queue = i + 1, now + args.every
        have = set(runner_groups(kube))
        for key in [k for k in pending if k in have]:
            job_id, queued = pending.pop(key)
            waits[job_id] = time.monotonic() - queued
        time.sleep(0.2)
    lost = [w for j, w in waits.items() if j in fake.dropped]
    if pending:
        print(f"  {len(pending)} jobs had no runner Job after the deadline", flush=True)
    time.sleep(20)
    per_group = runner_groups(kube)
    most = max((per_group.get(g, 0) for g in chosen), default=0)
    return list(waits.values()), lost, most


def runner_groups(kube: KubeClient) -> dict[tuple[str, str], int]:
    """Runner Jobs (alive or finished, not yet deleted) per group."""
    items = kube.get("/apis/batch/v1/jobs", labelSelector=SELECTOR)["items"]
    out: dict[tuple[str, str], int] = {}
    for j in items:
        key = (j["metadata"]["namespace"], j["metadata"]["labels"].get(GROUP_LABEL))
        out[key] = out.get(key, 0) + 1
    return out


def cadence_groups(op: Any) -> dict[str, float]:
    return {
        dict(labels)["reason"]: value
        for (name, labels), value in op.metrics().items()
        if name == "gitea_runner_operator_poll_cadence_groups" and value
    }


def print_run(run: str, r: dict[str, Any], flush: bool = False) -> None:
    print(
        f"{run}: {r['groups']} groups over {r['window']:.0f}s quiet: Gitea {r['requests']:.2f}"
        f" req/s, operator {r['cpu']:.3f} cores; groups by poll reason {r['reasons']}"
        f" (after the jobs: {r['after']}); hooks {r['hooks']}, deliveries refused {r['failed']};"
        f" most runner Jobs of a group with one job: {r['most']}",
        flush=flush,
    )
    print_row(run, r)


def print_row(run: str, r: dict[str, Any]) -> None:
    waits, lost = r["waits"], r["lost"]
    stats = (
        f"{common.percentile(waits, 0.5):6.2f}  {common.percentile(waits, 0.99):6.2f}"
        f"  {max(waits):6.2f}"
        if waits
        else "   n/a     n/a     n/a"
    )
    longest = f"{max(lost):.1f} ({len(lost)} lost)" if lost else "none lost"
    print(
        f"{run:<8} {r['groups']:>6}  {r['requests']:>11.2f}  {r['cpu']:>9.3f}  {stats}  {longest}",
        flush=True,
    )


def plot(results: dict[str, dict[str, Any]], target: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib (pip install -e '.[bench]'); no picture drawn")
        return
    runs = list(results)
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(12, 4))
    left.bar(runs, [results[r]["requests"] for r in runs], color="tab:blue")
    left.axhline(10, color="tab:red", linestyle="--", label="target: 10 req/s")
    left.set_title("Gitea requests/s, quiet", fontsize=10)
    left.legend(fontsize=8)
    middle.bar(runs, [results[r]["cpu"] for r in runs], color="tab:orange")
    middle.axhline(0.05, color="tab:red", linestyle="--", label="target: 0.05 cores")
    middle.set_title("operator CPU (cores), quiet", fontsize=10)
    middle.legend(fontsize=8)
    for i, r in enumerate(runs):
        waits, lost = results[r]["waits"], results[r]["lost"]
        right.scatter([i] * len(waits), waits, s=12, alpha=0.6, color="tab:green")
        if lost:
            right.scatter([i] * len(lost), lost, s=30, marker="x", color="tab:red")
    right.set_xticks(range(len(runs)), runs)
    right.set_yscale("log")
    right.set_title("queued -> runner Job (s); x: delivery lost", fontsize=10)
    n = next(iter(results.values()))["groups"]
    fig.suptitle(f"{n} quiet RunnerGroups on the fake Gitea (issue 47)", fontsize=11)
    fig.tight_layout()
    fig.savefig(target, dpi=100)
    print(f"drew {target}")


if __name__ == "__main__":
    raise SystemExit(main())
