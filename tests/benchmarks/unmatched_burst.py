"""Benchmark: reconcile durations in the platform's burst (issue 45): one org group and 150
repo groups on one Gitea, 300 jobs queued at once, with the unmatched-jobs evaluation of that
Gitea in the background (as the operator now runs it) or awaited after each pass that finds it
due (``--awaited``, as each pass did before).

With the real Reconciler and Ledger over an in-memory cluster (tests/support/family.py) and a
real clock: each round every group gets a newer answer (its runners take some of its jobs),
then every group is reconciled once. Prints the passes' ``reconcile_duration`` p50, p99 and
max, and how many evaluations ran.

    python -m tests.benchmarks.unmatched_burst [--rounds 10] [--repos 150] [--jobs 300]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from tests.support.builders import queued_job
from tests.support.family import T0, Clock, World, answer, group_spec, reconciler

URL = "https://gitea.platform.example"


async def burst(repos: int, jobs: int, rounds: int, awaited: bool) -> tuple[list[float], int]:
    world = World()
    world.add("platform", "org", group_spec("org", "acme", gitea={"url": URL}, maxActiveRunners=50))
    for r in range(repos):
        world.add(f"team-{r}", "ci", group_spec("repo", "acme", f"app{r}", gitea={"url": URL}))
    queued = {i: queued_job(i, f"acme/app{i % repos}") for i in range(1, jobs + 1)}
    rec, sources, _ = reconciler(world, clock=time.monotonic, wall=Clock(T0 + 30))
    took: list[float] = []
    for n in range(rounds):
        left = tuple(queued.values())[n * jobs // rounds :]  # runners took the rest
        sources.get("platform/org").latest = answer(left, started_at=float(n + 1))
        for r in range(repos):
            mine = tuple(j for j in left if j.id % repos == r)
            sources.get(f"team-{r}/ci").latest = answer(mine, started_at=float(n + 1))
        for key in list(world.groups):
            started = time.perf_counter()
            await rec.reconcile(key)
            if awaited:
                await rec.unmatched.idle()
            took.append(time.perf_counter() - started)
            await asyncio.sleep(0)
    await rec.unmatched.idle()
    evaluated = rec.unmatched.evaluated
    await rec.close()
    return took, evaluated


def _quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repos", type=int, default=150)
    parser.add_argument("--jobs", type=int, default=300)
    args = parser.parse_args(argv)
    print(f"1 org group + {args.repos} repo groups on one Gitea, {args.jobs} jobs queued")
    print(f"{'evaluation':>12} {'passes':>7} {'p50':>8} {'p99':>8} {'max':>8} {'evaluated':>10}")
    for awaited in (True, False):
        took, evaluated = asyncio.run(burst(args.repos, args.jobs, args.rounds, awaited))
        where = "awaited" if awaited else "background"
        p50, p99 = _quantile(took, 0.5) * 1000, _quantile(took, 0.99) * 1000
        print(
            f"{where:>12} {len(took):>7} {p50:7.1f}ms {p99:7.1f}ms "
            f"{max(took) * 1000:7.1f}ms {evaluated:>10}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
