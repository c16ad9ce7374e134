"""Benchmarks of issue 14's scale scenarios, on the testbed's real control plane (etcd,
kube-apiserver, controller-manager, scheduler, kwok) with a fake Gitea (fake_gitea.py: a real
Gitea cannot queue thousands of jobs quickly). They print figures and assert nothing.

    python -m tests.benchmarks.scale overlap  [--repos 1000] [--jobs-per-repo 2]
    python -m tests.benchmarks.scale busy     [--max 150] [--jobs 450] [--job-seconds 60]
    python -m tests.benchmarks.scale fairness [--burst 1000]
    python -m tests.benchmarks.scale soak     [--groups 1000] [--minutes 30] (soak.py)

- overlap: 1 org group plus N repo groups, all offering ``ubuntu-latest``, jobs queued in
  every repository. Runners never register (kwok Pods that run an hour), so the queue stays
  and the count must stay exact: time until every runner Job exists, the most runner Jobs
  ever alive (never more than jobs), reconcile p50/p99, leader changes (with leader
  election on), RSS and CPU.
- busy: one group, max 150, 450 jobs of ``--job-seconds``; the fake registers a runner 5 s
  after its Pod runs, which then takes a job at once; the Pod ends when its job does:
  mean busy runners between the first fill and the drain, total time against the ideal.
- fairness: one group gets ``--burst`` jobs; once its creates are under way a second group
  (another namespace) gets one: that job's queued-to-Job time.
- soak: ``--groups`` groups with steady churn (a job of 20 s queued in a random group every
  ``--every`` seconds); RSS sampled each minute: slope (MB/hour), peak, CPU.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.benchmarks import busy_trace, common
from tests.benchmarks import soak as soak_module
from tests.benchmarks.timeline import Timeline
from tests.support import manifests
from tests.support.fake_gitea import GroupScope, SimulatedGitea, wait
from tests.support.launcher import OperatorProcess
from tests.testbed.kube import KubeClient
from tests.testbed.sandbox import Sandbox

SELECTOR = "gitea.bpg.pw/managed-by=gitea-runner-operator"
RECONCILE = "gitea_runner_operator_reconcile_duration_seconds"
LABEL = "ubuntu-latest"


def kwok_image(seconds: float) -> str:
    return f"kwok.invalid/act_runner:complete-after-{int(seconds)}s"


def group(name: str, url: str, owner: str, repo: str | None, **spec: Any) -> dict[str, Any]:
    body = common.group(name, owner, url, [LABEL], **spec)
    if repo is not None:
        body["spec"] |= {"scope": "repo", "repo": repo}
    return body


@contextmanager
def bench(
    namespaces: list[str],
    fake: SimulatedGitea,
    simulate: bool,
    *extra: str,
    leader: bool = False,
    memprobe: Path | None = None,
    cpuprobe: Path | None = None,
) -> Iterator[tuple[KubeClient, OperatorProcess]]:
    with Sandbox(gitea=False, harness_node=False) as sandbox:
        kube = common.install(sandbox)
        fake.start(kube if simulate else None)
        try:
            for ns in namespaces:
                common.team(kube, ns, "registration-token", "api-token")
            with common.operator(
                sandbox,
                namespaces,
                *extra,
                leader_elect=leader,
                memprobe=memprobe,
                cpuprobe=cpuprobe,
            ) as op:
                yield kube, op
        finally:
            fake.stop()


def runner_jobs(kube: KubeClient, namespace: str | None = None) -> list[dict[str, Any]]:
    path = f"/apis/batch/v1/namespaces/{namespace}/jobs" if namespace else "/apis/batch/v1/jobs"
    return list(kube.get(path, labelSelector=SELECTOR)["items"])


def alive(jobs: list[dict[str, Any]]) -> int:
    def done(job: dict[str, Any]) -> bool:
        return any(
            c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            for c in (job.get("status") or {}).get("conditions") or []
        )

    return sum(1 for j in jobs if not done(j))


def reconcile_quantiles(op: OperatorProcess) -> str:
    m = op.metrics()
    p50 = common.histogram_quantile(m, RECONCILE, 0.5)
    p99 = common.histogram_quantile(m, RECONCILE, 0.99)
    count = common.total(m, f"{RECONCILE}_count")
    return f"{_ms(p50)} / {_ms(p99)} over {count:.0f} reconciles"


def _writes(op: OperatorProcess) -> float:
    return common.total(op.metrics(), "gitea_runner_operator_kube_writes_total")


def _recs(op: OperatorProcess) -> float:
    return common.total(op.metrics(), f"{RECONCILE}_count")


def _status_writes(op: OperatorProcess) -> float:
    """Status patches so far: a quiet group should write none (issue 37, it was 16.5/s at
    1,000 quiet groups while lastCheckTime was refreshed every minute)."""
    return _writes_by_kind(op).get("patch runnergroups/status", 0.0)


def _flips(op: OperatorProcess) -> int:
    """Ready turning False or True again (each a status write, with an Event), from the log:
    on a loaded machine the fake Gitea's answers time out now and then."""
    return op.log_count("group not working") + op.log_count("group healthy again")


def _writes_by_kind(op: OperatorProcess) -> dict[str, float]:
    """Writes so far by verb and resource (``create jobs``, ``patch runnergroups/status``...)."""
    return common.writes_by_kind(op.metrics())


def _print_writes_per_runner(
    before: dict[str, float], after: dict[str, float], runners: int
) -> None:
    """What each runner created cost in writes, by kind: the figure issue 27 asks to cut."""
    total = 0.0
    for kind in sorted(after):
        n = after[kind] - before.get(kind, 0.0)
        if n:
            total += n
            print(f"  {kind}: {n:.0f} ({n / max(runners, 1):.2f} per runner)")
    print(f"  all writes: {total:.0f} ({total / max(runners, 1):.2f} per runner created)")


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.1f} ms"


# -- scenarios ------------------------------------------------------------------------------


def overlap(args: argparse.Namespace) -> None:
    owner = f"acme-{uuid.uuid4().hex[:4]}"
    fake = SimulatedGitea()
    namespaces = [f"{owner}-{i:03d}" for i in range(args.namespaces)]
    jobs = args.repos * args.jobs_per_repo
    extra = (
        ("--kube-write-qps", str(args.qps), "--kube-write-burst", str(int(args.qps * 2)))
        if args.qps is not None
        else ()  # the operator's defaults
    )
    probe = Path(args.cpuprobe) if args.cpuprobe else None
    with bench(
        namespaces,
        fake,
        False,
        *extra,
        *args.operator_args,
        leader=not args.no_leader,
        cpuprobe=probe,
    ) as (
        kube,
        op,
    ):
        fake.group(namespaces[0], "fallback", GroupScope(owner, None, (LABEL,)))
        started = time.monotonic()
        manifests.apply(
            kube,
            group("fallback", fake.url, owner, None, maxActiveRunners=jobs + 100,
                  image=kwok_image(3600), pollInterval=args.poll_interval),
            namespace=namespaces[0],
        )  # fmt: skip
        for i in range(args.repos):
            ns = namespaces[i % len(namespaces)]
            fake.group(ns, f"r{i:04d}", GroupScope(owner, f"r{i:04d}", (LABEL,)))
            manifests.apply(
                kube,
                group(f"r{i:04d}", fake.url, owner, f"r{i:04d}", maxActiveRunners=10,
                      image=kwok_image(3600), pollInterval=args.poll_interval),
                namespace=ns,
            )  # fmt: skip
        print(
            f"created 1 org group + {args.repos} repo groups in {time.monotonic() - started:.0f}s"
        )
        time.sleep(args.settle)
        # Quiet: every group polling, no job queued (the "quiet" targets of issue 27).
        cpu_q, t_q, req_q, rec_q = op.cpu_seconds(), time.monotonic(), fake.requests, _recs(op)
        writes_q, status_q, flips_q = _writes(op), _status_writes(op), _flips(op)
        if probe:
            op.snapshot()  # the CPU profile of the quiet minute starts
        time.sleep(args.quiet)
        if probe:
            op.snapshot()  # cpu-1.txt: the quiet minute
        quiet = time.monotonic() - t_q
        print(f"quiet {quiet:.0f}s: CPU {(op.cpu_seconds() - cpu_q) / quiet:.3f} cores, RSS "
              f"{op.rss_mb():.0f} MB, reconciles {(_recs(op) - rec_q) / quiet:.1f}/s, Gitea "
              f"requests {(fake.requests - req_q) / quiet:.1f}/s, Kubernetes writes "
              f"{(_writes(op) - writes_q) / quiet:.1f}/s, of which status "
              f"{(_status_writes(op) - status_q) / quiet:.2f}/s; Ready changes (Gitea failing "
              f"under load) {_flips(op) - flips_q}", flush=True)  # fmt: skip
        if args.quiet_only:
            return
        cpu0, t0, writes0 = op.cpu_seconds(), time.monotonic(), _writes(op)
        kinds0 = _writes_by_kind(op)
        for i in range(args.repos):
            fake.queue(owner, f"r{i:04d}", (LABEL,), args.jobs_per_repo)
        most, done_at, rss = 0, None, 0.0
        timeline = Timeline(op, fake, t0)
        while time.monotonic() - t0 < args.timeout:
            count = alive(runner_jobs(kube))
            most, rss = max(most, count), max(rss, op.rss_mb())
            timeline.sample(count)
            if count >= jobs and done_at is None:
                done_at = time.monotonic() - t0
            if done_at is not None and time.monotonic() - t0 > done_at + args.hold:
                break
            time.sleep(1)
        elapsed = time.monotonic() - t0
        if probe:
            op.snapshot()  # cpu-2.txt: the fill
        per_group: dict[str, int] = {}
        for job in runner_jobs(kube):
            name = job["metadata"]["labels"].get("gitea.bpg.pw/runnergroup-name", "?")
            per_group[name] = per_group.get(name, 0) + 1
        spread = sorted(set(v for k, v in per_group.items() if k != "fallback"))
        timeline.print()
        print(f"queued jobs: {jobs} over {args.repos} repositories")
        print(f"every runner Job after: {f'{done_at:.1f}s' if done_at else 'not reached'}")
        print(f"most runner Jobs alive: {most}; org group's: {per_group.get('fallback', 0)};"
              f" per repo group: {spread}")  # fmt: skip
        print(f"reconcile p50 / p99: {reconcile_quantiles(op)}")
        print(f"leader changes: {op.log_count('became leader') - 1}")
        print(f"Kubernetes writes: {_writes(op) - writes0:.0f} in {elapsed:.0f}s "
              f"(limit {args.qps or 'default'}/s)")  # fmt: skip
        _print_writes_per_runner(kinds0, _writes_by_kind(op), len(runner_jobs(kube)))
        print(f"operator peak RSS: {rss:.0f} MB; CPU: {(op.cpu_seconds() - cpu0) / elapsed:.2f}"
              f" cores over {elapsed:.0f}s")  # fmt: skip


def busy(args: argparse.Namespace) -> None:
    owner = f"busy-{uuid.uuid4().hex[:4]}"
    fake = SimulatedGitea(job_seconds=args.job_seconds, start_delay=args.start)
    ns = f"{owner}-team"
    with bench([ns], fake, True, *args.operator_args) as (kube, op):
        fake.group(ns, "busy", GroupScope(owner, None, (LABEL,)))
        manifests.apply(
            kube,
            group("busy", fake.url, owner, None, maxActiveRunners=args.max,
                  image=kwok_image(3600), pollInterval=args.poll_interval),
            namespace=ns,
        )  # fmt: skip
        time.sleep(10)
        cpu0, writes0 = op.cpu_seconds(), _writes(op)
        tracer = busy_trace.Tracer(kube, ns, fake)
        fake.queue(owner, "app", (LABEL,), args.jobs)
        t0 = time.monotonic()
        tracer.start(t0)
        samples: list[tuple[float, int]] = []
        drain: float | None = None  # from when no job is left queued: fewer can be busy
        while time.monotonic() - t0 < args.timeout:
            samples.append((time.monotonic() - t0, fake.busy_runners()))
            if drain is None and fake.count("queued") == 0:
                drain = samples[-1][0]
            if fake.count("success") >= args.jobs:
                break
            time.sleep(1)
        total = time.monotonic() - t0
        tracer.stop()
        drain = drain if drain is not None else total
        waves = -(-args.jobs // args.max)
        ideal = waves * (args.job_seconds + args.start)
        filled = next((t for t, b in samples if b >= args.max * 0.95), None)
        window = [b for t, b in samples if filled is not None and filled <= t <= drain]
        mean = statistics.mean(window) if window else 0.0
        print(f"jobs done: {fake.count('success')}/{args.jobs}")
        print(f"total time: {total:.0f}s; ideal {ideal:.0f}s ({waves} waves of "
              f"{args.start:.0f}s start + {args.job_seconds:.0f}s job): "
              f"{total / ideal:.2f}x")  # fmt: skip
        print(f"first fill (95% busy) at {filled}s; poll interval {args.poll_interval}")
        print(f"mean busy runners from first fill to drain ({drain:.0f}s): "
              f"{mean:.1f} of {args.max} ({100 * mean / args.max:.0f}%)")  # fmt: skip
        print(f"lowest busy in that window: {min(window) if window else 'n/a'}")
        print(f"reconcile p50 / p99: {reconcile_quantiles(op)}")
        print(f"Kubernetes writes: {_writes(op) - writes0:.0f} "
              f"({(_writes(op) - writes0) / max(1, args.jobs):.1f} per runner)")  # fmt: skip
        print(
            f"operator CPU: {(op.cpu_seconds() - cpu0) / total:.2f} cores; RSS {op.rss_mb():.0f} MB"
        )
        busy_trace.report(tracer, args.max)
        if args.keep_log and op.log_path:
            shutil.copy(op.log_path, Path(args.keep_log) / "operator-busy.log")
        if args.plot:
            title = (f"one group, max {args.max}, {args.jobs} jobs of {args.job_seconds:.0f}s: "
                     f"{100 * mean / args.max:.0f}% busy, {total / ideal:.2f}x ideal")  # fmt: skip
            busy_trace.plot(tracer, args.plot, title, args.max)


def fairness(args: argparse.Namespace) -> None:
    owner = f"fair-{uuid.uuid4().hex[:4]}"
    fake = SimulatedGitea()
    big, small = f"{owner}-big", f"{owner}-small"
    with bench([big, small], fake, False, "--kube-write-qps", str(args.qps)) as (kube, op):
        for ns, name, repo in ((big, "burst", "a"), (small, "one", "b")):
            fake.group(ns, name, GroupScope(owner, repo, (LABEL,)))
            manifests.apply(
                kube,
                group(name, fake.url, owner, repo, maxActiveRunners=args.burst + 10,
                      image=kwok_image(3600), pollInterval="5s"),
                namespace=ns,
            )  # fmt: skip
        time.sleep(15)
        fake.queue(owner, "a", (LABEL,), args.burst)
        wait(lambda: len(runner_jobs(kube, big)) >= 50, 60, 0.2)
        fake.queue(owner, "b", (LABEL,), 1)
        t0 = time.monotonic()
        got = wait(lambda: len(runner_jobs(kube, small)) >= 1, 300, 0.2)
        burst_at = len(runner_jobs(kube, big))
        print(f"burst group: {args.burst} jobs; second group's job queued once {burst_at}"
              f" burst Jobs existed")  # fmt: skip
        print(f"second group's queued-to-Job time: {f'{got:.1f}s' if got else 'over 300s'}"
              f" (poll interval 5s, write limit {args.qps}/s)")  # fmt: skip
        all_at = wait(lambda: len(runner_jobs(kube, big)) >= args.burst, 600, 1)
        print(
            f"burst complete {t0 and (time.monotonic() - t0):.0f}s after that; "
            f"{'done' if all_at is not None else 'not done'}"
        )
        print(f"reconcile p50 / p99: {reconcile_quantiles(op)}")


def soak(args: argparse.Namespace) -> None:
    soak_module.run(args, bench, group, LABEL, kwok_image(3600))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="scenario", required=True)
    p = sub.add_parser("overlap")
    p.add_argument("--repos", type=int, default=1000)
    p.add_argument("--jobs-per-repo", type=int, default=2)
    p.add_argument("--namespaces", type=int, default=50)
    p.add_argument("--poll-interval", default="15s")
    p.add_argument("--settle", type=float, default=30.0)
    p.add_argument("--hold", type=float, default=30.0, help="seconds watched after the fill")
    p.add_argument(
        "--quiet",
        type=float,
        default=60.0,
        help="seconds measured before jobs (180 or more to see status writes once a minute)",
    )
    p.add_argument("--no-leader", action="store_true", help="without leader election")
    p.add_argument("--quiet-only", action="store_true", help="stop after the quiet phase")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--cpuprobe", help="profile the operator's CPU (cpuprobe.py) into this DIR")
    p.add_argument(
        "--qps", type=float, default=None, help="--kube-write-qps (default: the operator's)"
    )
    p.add_argument("operator_args", nargs="*", help="extra operator flags, after --")
    p = sub.add_parser("busy")
    p.add_argument("--keep-log", help="copy the operator's log to this folder")
    p.add_argument("--max", type=int, default=150)
    p.add_argument("--jobs", type=int, default=450)
    p.add_argument("--job-seconds", type=float, default=60.0)
    p.add_argument("--start", type=float, default=5.0)
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--poll-interval", default="10s")
    p.add_argument("--plot", help="draw busy runners over time into this PNG (matplotlib)")
    p.add_argument("operator_args", nargs="*", help="extra operator flags, after --")
    p = sub.add_parser("fairness")
    p.add_argument("--burst", type=int, default=1000)
    p.add_argument("--qps", type=float, default=50.0)
    p = sub.add_parser("soak")
    soak_module.add_arguments(p)
    args = parser.parse_args(argv)
    {"overlap": overlap, "busy": busy, "fairness": fairness, "soak": soak}[args.scenario](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
