"""The soak of issue 14/27: many quiet groups with steady churn, for hours; is memory flat?

    python -m tests.benchmarks.scale soak [--groups 1000] [--minutes 30] [--every 0.5]
        [--csv /work/soak/soak.csv] [--plot docs/soak.png] [--snapshots DIR --snapshot-every 30]
    python -m tests.benchmarks.scale soak --plot-from /work/soak/soak.csv --plot docs/soak.png

``--groups`` repo groups (in ``--namespaces`` namespaces) on the testbed's control plane and
the fake Gitea; a job of 20 s is queued in a random group every ``--every`` seconds. Once a
minute the operator's RSS, its CPU over that minute, the jobs done and still queued, the
machine's load, the operator's metric series per group and how many groups have had a job
are appended to ``--csv`` (flushed at once, so the file can be read, and
plotted with ``--plot-from``, while the soak runs or after it was killed). At the end it
prints the RSS at start, the peak, the slope over the second half (least squares, MB/hour),
CPU and reconcile quantiles, and draws ``--plot`` (needs matplotlib, the ``bench`` extra).
``--snapshots DIR`` runs the operator under tracemalloc (memprobe.py) and takes a snapshot
every ``--snapshot-every`` minutes: ``python -m tests.benchmarks.memprobe --report A B``
shows the growth between two of them. tracemalloc costs memory itself: RSS figures come
from runs without it.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from tests.benchmarks import common
from tests.support.fake_gitea import GroupScope, SimulatedGitea
from tests.support.launcher import OperatorProcess

# The last two tell bounded growth from a leak: what the operator keeps per group grows
# until every group has had a job, then stops.
COLUMNS = (
    "minutes",
    "rss_mb",
    "cpu_cores",
    "jobs_done",
    "jobs_queued",
    "load1",
    "series_per_group",
    "groups_with_jobs",
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--groups", type=int, default=1000)
    p.add_argument("--namespaces", type=int, default=50)
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--every", type=float, default=0.5, help="seconds between queued jobs")
    p.add_argument("--csv", help="append one row a minute to this CSV (default: a temp file)")
    p.add_argument("--plot", help="draw RSS and CPU over time into this PNG (matplotlib)")
    p.add_argument("--plot-from", help="only draw --plot from this CSV; no testbed")
    p.add_argument("--snapshots", help="run under tracemalloc, snapshots into this directory")
    p.add_argument("--snapshot-every", type=float, default=30.0, help="minutes")


def run(args: argparse.Namespace, bench: Any, group: Any, label: str, image: str) -> None:
    """``bench``/``group`` are scale.py's set-up helpers (passed in: no import cycle)."""
    if args.plot_from:
        plot(Path(args.plot_from), Path(args.plot or "soak.png"))
        return
    owner = f"soak-{uuid.uuid4().hex[:4]}"
    fake = SimulatedGitea(job_seconds=20, start_delay=2)
    namespaces = [f"{owner}-{i:03d}" for i in range(args.namespaces)]
    target = Path(args.csv or f"/tmp/soak-{owner}.csv")
    probe = Path(args.snapshots) if args.snapshots else None
    with bench(namespaces, fake, True, memprobe=probe) as (kube, op):
        for i in range(args.groups):
            ns, name = namespaces[i % len(namespaces)], f"g{i:04d}"
            fake.group(ns, name, GroupScope(owner, f"r{i:04d}", (label,)))
            common_apply(
                kube,
                group(
                    name,
                    fake.url,
                    owner,
                    f"r{i:04d}",
                    maxActiveRunners=3,
                    image=image,
                    pollInterval="15s",
                ),
                ns,
            )
        time.sleep(60)
        series = per_group_series(op, args.groups)
        print(f"metric series per group: {series:.1f}", flush=True)
        t0, cpu0 = time.monotonic(), op.cpu_seconds()
        samples: list[tuple[float, float]] = []
        next_sample, next_snap, last_cpu, last_t = t0, t0, cpu0, t0
        with target.open("w", newline="") as fh:
            out = csv.writer(fh)
            fh.write(
                f"# groups={args.groups} namespaces={args.namespaces} every={args.every}s"
                f" started={time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n"
            )
            out.writerow(COLUMNS)
            had_jobs: set[str] = set()
            while time.monotonic() - t0 < args.minutes * 60:
                owner_repo = f"r{random.randrange(args.groups):04d}"  # noqa: S311
                if args.every > 0:
                    fake.queue(owner, owner_repo, (label,), 1)
                    had_jobs.add(owner_repo)
                now = time.monotonic()
                if probe is not None and now >= next_snap:
                    op.snapshot()
                    next_snap += args.snapshot_every * 60
                if now >= next_sample:
                    cpu = op.cpu_seconds()
                    row = (
                        (now - t0) / 60,
                        op.rss_mb(),
                        (cpu - last_cpu) / max(now - last_t, 1e-9),
                        fake.count("success"),
                        fake.count("queued"),
                        os.getloadavg()[0],
                        per_group_series(op, args.groups),
                        len(had_jobs),
                    )
                    last_cpu, last_t = cpu, now
                    out.writerow([f"{v:.3f}" if isinstance(v, float) else v for v in row])
                    fh.flush()
                    samples.append((row[0] / 60, row[1]))
                    print(
                        f"  t={row[0]:6.1f} min RSS {row[1]:.0f} MB CPU {row[2]:.2f} "
                        f"load {row[5]:.1f} series/group {row[6]:.1f} groups with jobs {row[7]}",
                        flush=True,
                    )
                    next_sample += 60
                time.sleep(args.every if args.every > 0 else 1.0)
            if probe is not None:
                op.snapshot()
                time.sleep(5)
        elapsed = time.monotonic() - t0
        half = [s for s in samples if s[0] >= samples[-1][0] / 2] or samples
        print(
            f"soak: {args.groups} groups, {elapsed / 60:.0f} min, jobs done "
            f"{fake.count('success')}, still queued {fake.count('queued')}"
        )
        print(
            f"RSS at start {samples[0][1]:.0f} MB; peak {max(r for _, r in samples):.0f} MB; "
            f"slope over the second half: {slope(half):+.1f} MB/hour"
        )
        print(f"operator CPU: {(op.cpu_seconds() - cpu0) / elapsed:.3f} cores")
        print(f"metric series per group at the end: {per_group_series(op, args.groups):.1f}")
        print(f"reconcile p50 / p99: {reconcile(op)}")
        print(f"samples: {target}")
    if args.plot:
        plot(target, Path(args.plot))


def common_apply(kube: Any, body: dict[str, Any], namespace: str) -> None:
    from tests.support import manifests

    manifests.apply(kube, body, namespace=namespace)


def per_group_series(op: OperatorProcess, groups: int) -> float:
    """Samples on /metrics that carry a ``runnergroup`` label, per group."""
    return sum(1 for (_, labels) in op.metrics() if "runnergroup" in dict(labels)) / groups


def reconcile(op: OperatorProcess) -> str:
    name = "gitea_runner_operator_reconcile_duration_seconds"
    m = op.metrics()
    p50, p99 = common.histogram_quantile(m, name, 0.5), common.histogram_quantile(m, name, 0.99)
    fmt = lambda s: "n/a" if s is None else f"{s * 1000:.1f} ms"  # noqa: E731
    return f"{fmt(p50)} / {fmt(p99)} over {common.total(m, name + '_count'):.0f} reconciles"


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (hours, MB): MB/hour."""
    if len(points) < 2:
        return 0.0
    mx = statistics.mean(x for x, _ in points)
    my = statistics.mean(y for _, y in points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def read(source: Path) -> tuple[str, list[dict[str, float]]]:
    lines = source.read_text().splitlines()
    note = next((ln[1:].strip() for ln in lines if ln.startswith("#")), "")
    rows = csv.DictReader(ln for ln in lines if not ln.startswith("#"))
    return note, [{k: float(v) for k, v in row.items()} for row in rows]


def plot(source: Path, target: Path) -> None:
    """RSS (with the second half's slope) and CPU over time, from the CSV alone."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib (pip install -e '.[bench]'); no picture drawn")
        return
    note, rows = read(source)
    if not rows:
        print(f"{source}: no samples yet")
        return
    t = [r["minutes"] / 60 for r in rows]
    rss = [r["rss_mb"] for r in rows]
    half = [(x, y) for x, y in zip(t, rss, strict=True) if x >= t[-1] / 2]
    s = slope(half)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    top.plot(t, rss, label="operator RSS")
    if len(half) > 1:
        mx, my = statistics.mean(x for x, _ in half), statistics.mean(y for _, y in half)
        top.plot(
            [half[0][0], half[-1][0]],
            [my + s * (half[0][0] - mx), my + s * (half[-1][0] - mx)],
            "--",
            label=f"second half: {s:+.1f} MB/h",
        )
    top.set_ylabel("MB")
    top.set_ylim(bottom=0)
    if rows and "groups_with_jobs" in rows[0]:
        # What the operator keeps per group grows until every group has had a job.
        groups = top.twinx()
        groups.plot(
            t, [r["groups_with_jobs"] for r in rows], ":", color="tab:green",
            label="groups that have had a job",
        )  # fmt: skip
        groups.set_ylabel("groups")
        groups.set_ylim(bottom=0)
        groups.legend(loc="upper left")
    top.set_title(
        f"soak: RSS {rss[0]:.0f} MB at start, peak {max(rss):.0f} MB ({note})", fontsize=9
    )
    top.legend(loc="lower right")
    top.grid(alpha=0.3)
    bottom.plot(t, [r["cpu_cores"] for r in rows], label="operator CPU (cores, per minute)")
    bottom.set_ylabel("operator CPU (cores)")
    bottom.set_xlabel("hours")
    bottom.set_ylim(bottom=0)
    bottom.legend(loc="upper left")
    bottom.grid(alpha=0.3)
    # The machine's load on its own scale: other work on a shared machine can dwarf ours.
    load = bottom.twinx()
    load.plot(t, [r["load1"] for r in rows], color="tab:gray", alpha=0.5, label="load average")
    load.set_ylabel("machine load average (1 min)")
    load.set_ylim(bottom=0)
    load.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(target, dpi=100)
    print(f"drew {target} from {len(rows)} samples ({t[-1]:.2f} h): slope {s:+.1f} MB/h")
