"""Benchmark: how long the garbage collector holds the event loop, with the operator's heap
(issue 45: full collections of up to 131 ms set the loop lag's p99 under attack).

Builds a heap the size of a busy operator's (``--jobs`` queued jobs kept as parsed models,
``--objects`` cached Kubernetes objects as nested dicts), then for ``--seconds`` runs a
workload that keeps allocating and dropping what polls do (a page of jobs parsed and turned
into models, every few milliseconds) while a loop watch (runtime/loopwatch.py, every 10 ms)
measures how late the loop wakes, and ``gc.callbacks`` time each collection. Each mode runs
in a fresh process: ``default`` (CPython's thresholds), ``frozen`` (the heap moved to the
permanent generation once built: runtime/gc_tuning.settle_heap), ``frozen+thresholds-20``
(and the thresholds (10,000, 20, 20) the operator had before issue 45's stall probe),
``frozen+thresholds`` (runtime/gc_tuning.THRESHOLDS) and ``frozen+refreeze`` (also
gc_tuning.refreeze every REFREEZE_EVERY seconds). Prints the loop lag p50, p99 and max, and
the longest collection of each generation.

    python -m tests.benchmarks.gc_lag [--jobs 100000] [--objects 20000] [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import subprocess
import sys
import time

from gitea_runner_operator.api.gitea import JobList
from gitea_runner_operator.runtime import gc_tuning
from gitea_runner_operator.runtime.loopwatch import LoopWatch

MODES = ("default", "frozen", "frozen+thresholds-20", "frozen+thresholds", "frozen+refreeze")
# The middle threshold before issue 45's stall probe: a middle collection walked up to
# 10,000 * 20 objects.
OLD_THRESHOLDS = (10_000, 20, 20)


def _page(start: int) -> bytes:
    jobs = [
        {
            "id": i,
            "status": "queued",
            "labels": [f"label-{i % 7}", "ubuntu-latest"],
            "url": f"https://gitea.example/api/v1/repos/acme/app/actions/jobs/{i}",
            "created_at": "2026-01-01T00:00:00Z",
        }
        for i in range(start, start + 50)
    ]
    return json.dumps({"jobs": jobs, "total_count": 50}).encode()


def _heap(jobs: int, objects: int) -> list[object]:
    kept: list[object] = []
    for start in range(0, jobs, 50):
        kept.append(tuple(JobList.model_validate_json(_page(start)).jobs or ()))
    for i in range(objects):
        kept.append(
            {
                "metadata": {"name": f"job-{i}", "namespace": f"ns-{i % 100}", "labels": {}},
                "status": {"conditions": [{"type": "Complete", "status": "True"}]},
            }
        )
    return kept


async def _run(mode: str, jobs: int, objects: int, seconds: float) -> dict[str, float]:
    if mode == "frozen+thresholds-20":
        gc.set_threshold(*OLD_THRESHOLDS)
    elif "thresholds" in mode or "refreeze" in mode:
        gc_tuning.tune_thresholds()
    heap = _heap(jobs, objects)
    if mode != "default":
        gc_tuning.settle_heap()
    pauses: dict[int, float] = {}
    cpu: dict[int, float] = {}  # the longest by the thread's CPU: a loaded machine stretches
    started: list[float] = [0.0, 0.0]  # the wall clock, not this

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = [time.perf_counter(), time.thread_time()]
        else:
            gen = info["generation"]
            pauses[gen] = max(pauses.get(gen, 0.0), time.perf_counter() - started[0])
            cpu[gen] = max(cpu.get(gen, 0.0), time.thread_time() - started[1])

    gc.callbacks.append(timed)
    refreezing = asyncio.create_task(_refreeze()) if "refreeze" in mode else None
    lags: list[float] = []
    churn: list[object] = []
    async with LoopWatch(interval=0.01, observe=lags.append):
        end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < end:
            churn.append(JobList.model_validate_json(_page(n * 50)).jobs)
            if len(churn) > 200:  # answers replaced by newer ones, as polls do
                del churn[:100]
            n += 1
            await asyncio.sleep(0.002)
    if refreezing is not None:
        refreezing.cancel()
    gc.callbacks.remove(timed)
    del heap
    q = statistics.quantiles(lags, n=100, method="inclusive")
    return {
        "p50": q[49],
        "p99": q[98],
        "max": max(lags),
        **{f"gen{g}": pauses.get(g, 0.0) for g in (0, 1, 2)},
        **{f"cpu{g}": cpu.get(g, 0.0) for g in (0, 1, 2)},
    }


async def _refreeze() -> None:
    """runtime/gc_tuning._settle's loop, from the first settle on."""
    while True:
        await asyncio.sleep(gc_tuning.REFREEZE_EVERY)
        gc_tuning.refreeze()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--objects", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--mode", choices=MODES)
    args = parser.parse_args(argv)
    if args.mode is not None:
        figures = asyncio.run(_run(args.mode, args.jobs, args.objects, args.seconds))
        print(json.dumps(figures))
        return 0
    print(f"heap: {args.jobs} kept jobs, {args.objects} cached objects; {args.seconds:.0f} s each")
    print("longest collection of each generation: wall clock, and the thread's CPU")
    columns = " ".join(f"{name:>13}" for name in ("gen0", "gen1", "gen2"))
    print(f"{'mode':>20} {'lag p50':>8} {'p99':>8} {'max':>8} {columns}")
    for mode in MODES:
        out = subprocess.run(
            [sys.executable, "-m", "tests.benchmarks.gc_lag", "--mode", mode,
             "--jobs", str(args.jobs), "--objects", str(args.objects),
             "--seconds", str(args.seconds)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        f = json.loads(out.stdout.strip().splitlines()[-1])
        ms = {k: v * 1000 for k, v in f.items()}
        gens = " ".join(f"{ms[f'gen{g}']:6.1f}/{ms[f'cpu{g}']:5.1f}ms" for g in (0, 1, 2))
        print(f"{mode:>20} {ms['p50']:7.1f}ms {ms['p99']:7.1f}ms {ms['max']:7.1f}ms {gens}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
