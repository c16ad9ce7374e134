"""Benchmark: the parts of a replica's memory under ``--sharding`` (issue 46), on the testbed's
real control plane with the fake Gitea. It prints figures and asserts nothing.

Each figure is the resident memory (RSS, and its anonymous and file-backed parts from
/proc/PID/status) of a fresh operator process, the median of ``--samples`` readings a second
apart, read ``--settle`` seconds after every domain is held (the first polls of the groups
just taken are over by then):

1. **fixed**: one replica whose namespaces hold no RunnerGroup, after its caches synced: the
   interpreter, the imports, the API and HTTP clients, the metrics, the informers' empty
   caches. What every replica pays whatever its share.
2. **alone**: one replica serving all ``--groups`` quiet groups: per served group,
   ``(alone - fixed) / groups``.
3. **one of three**: three replicas over the same groups: each holds ``h`` groups and keeps
   the others slim (spec and Ready); per slim group,
   ``(replica - fixed - h * per served) / (groups - h)``.

From those it prints what a replica of three would weigh if a slim group cost nothing (the
floor the fixed part sets), and the share of one replica's RSS that a replica of three holds
(issue 46's target: at most 45 % at 2,000 groups). Python never returns every freed page,
so each configuration runs in processes of its own.

    python -m tests.benchmarks.replica_memory [--groups 600] [--namespaces 20] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from tests.benchmarks import common
from tests.benchmarks.replicas import LABEL, held, replicas, until_held
from tests.support import manifests
from tests.support.fake_gitea import GroupScope, SimulatedGitea
from tests.support.launcher import OperatorProcess
from tests.testbed.sandbox import Sandbox


def memory(op: OperatorProcess) -> dict[str, float]:
    """RSS and its parts, in MB, from /proc/PID/status."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{op.proc.pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
            out[name] = int(value.split()[0]) / 1024
    return out


def sample(ops: list[OperatorProcess], samples: int) -> list[dict[str, float]]:
    """Each replica's median reading of ``samples``, one a second."""
    readings: list[list[dict[str, float]]] = [[] for _ in ops]
    for _ in range(samples):
        for i, op in enumerate(ops):
            readings[i].append(memory(op))
        time.sleep(1.0)
    return [{key: statistics.median(r[key] for r in rows) for key in rows[0]} for rows in readings]


def _row(label: str, m: dict[str, float], extra: str = "") -> str:
    return (
        f"  {label:<28} RSS {m['VmRSS']:6.1f} MB (anonymous {m.get('RssAnon', 0):6.1f}, "
        f"file-backed {m.get('RssFile', 0):5.1f}){extra}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=600)
    parser.add_argument("--namespaces", type=int, default=20)
    parser.add_argument("--replicas", type=int, default=3, help="the replicas sharing them")
    parser.add_argument("--poll-interval", default="15s")
    parser.add_argument("--settle", type=float, default=30.0, help="seconds before reading")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)

    owner = f"mem-{uuid.uuid4().hex[:4]}"
    fake = SimulatedGitea()
    namespaces = [f"{owner}-{i:03d}" for i in range(args.namespaces)]
    figures: dict[str, Any] = {"groups": args.groups, "replicas": args.replicas}
    with Sandbox(gitea=False, harness_node=False) as sandbox:
        kube = common.install(sandbox)
        fake.start(kube)
        try:
            for ns in namespaces:
                common.team(kube, ns, "registration-token", "api-token")
            print(f"load {common_load():.1f}; the fixed part: no RunnerGroup", flush=True)
            with replicas(sandbox, namespaces, 1) as ops:
                time.sleep(args.settle)  # synced, its sharding rounds running
                (fixed,) = sample(ops, args.samples)
            print(_row("fixed (no group)", fixed), flush=True)
            for i in range(args.groups):
                ns, name, repo = namespaces[i % len(namespaces)], f"g{i:04d}", f"r{i:04d}"
                fake.group(ns, name, GroupScope(owner, repo, (LABEL,)))
                body = common.group(name, owner, fake.url, [LABEL])
                body["spec"] |= {"scope": "repo", "repo": repo, "pollInterval": args.poll_interval}
                manifests.apply(kube, body, namespace=ns)
            with replicas(sandbox, namespaces, 1) as ops:
                until_held(ops, args.groups, limit=600)
                time.sleep(args.settle)
                (alone,) = sample(ops, args.samples)
            per_served = (alone["VmRSS"] - fixed["VmRSS"]) / args.groups
            print(
                _row(
                    f"alone, {args.groups} groups", alone, f"; {per_served * 1024:.1f} KB a group"
                ),
                flush=True,
            )
            with replicas(sandbox, namespaces, args.replicas) as ops:
                until_held(ops, args.groups, limit=600)
                time.sleep(args.settle)
                shares = [held(op) for op in ops]
                many = sample(ops, args.samples)
            rows = []
            for h, m in zip(shares, many, strict=True):
                slim = args.groups - h
                per_slim = (m["VmRSS"] - fixed["VmRSS"] - h * per_served) / slim if slim else 0.0
                floor = fixed["VmRSS"] + h * per_served
                rows.append({"held": h, **m, "per_slim_kb": per_slim * 1024, "floor": floor})
                print(
                    _row(
                        f"1 of {args.replicas}, serving {h}",
                        m,
                        f"; {per_slim * 1024:.1f} KB a slim group; "
                        f"{m['VmRSS'] / alone['VmRSS']:.0%} of one alone (with slim groups free: "
                        f"{floor:.1f} MB, "
                        f"{floor / alone['VmRSS']:.0%})",
                    ),
                    flush=True,
                )
            figures |= {
                "fixed": fixed,
                "alone": alone,
                "per_served_kb": per_served * 1024,
                "shared": rows,
                "load": common_load(),
            }
            print(
                f"fixed part {fixed['VmRSS']:.1f} MB ({fixed['VmRSS'] / alone['VmRSS']:.0%} of one "
                f"replica alone at {args.groups} groups); per served group "
                f"{per_served * 1024:.1f} KB; load {common_load():.1f}",
                flush=True,
            )
            if args.json:
                Path(args.json).write_text(json.dumps(figures, indent=1))
        finally:
            fake.stop()
    return 0


def common_load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


if __name__ == "__main__":
    raise SystemExit(main())
