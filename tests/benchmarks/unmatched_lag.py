"""Benchmark: how long the unmatched-jobs evaluation holds the event loop (issue 36 row 1).

A Gitea lists ``--jobs`` queued jobs, each with a label of its own, to ``--groups`` groups of
64 labels. A loop watch (runtime/loopwatch.py, waking every 10 ms) runs while the book
evaluates, once on the loop (``evaluate``, as before) and once in the book's thread
(``unmatched_flight.Evaluations``, in the background, as the operator now does), each with
and without the bound on label sets weighed. It prints the CPU of each evaluation and the
loop's worst lag meanwhile.

    python -m tests.benchmarks.unmatched_lag [--jobs 25000] [--groups 10]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import time

from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.reconcile.capacity.accounting import Answer, Claimant
from gitea_runner_operator.reconcile.capacity.ledger import Ledger
from gitea_runner_operator.reconcile.why import unmatched_book
from gitea_runner_operator.reconcile.why.unmatched_book import UnmatchedBook, Verdict
from gitea_runner_operator.reconcile.why.unmatched_flight import Evaluations
from gitea_runner_operator.runtime.loopwatch import LoopWatch
from tests.support.builders import queued_job

URL = "https://gitea.example"
QUEUED = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


async def one(jobs: int, groups: int, elsewhere: bool, bound: int) -> tuple[float, float, int]:
    """(CPU seconds of the process, worst loop lag in seconds, label sets counted)."""
    ledger = Ledger()
    book = UnmatchedBook(ledger.members, min_interval=0, max_sets=bound)
    published: list[Verdict] = []

    async def keep(verdict: Verdict) -> None:
        published.append(verdict)

    listed = [
        queued_job(i, "evil/app", (f"lbl-{i:06d}",), url=URL, created_at=QUEUED)
        for i in range(1, jobs + 1)
    ]
    for g in range(groups):
        offered = frozenset(f"ubuntu-{g}-{k}" for k in range(64))
        claimant = Claimant(f"evil/g{g}", Scope.ORG, "evil", None, offered, 0, 0)
        ledger.report(URL, claimant, Answer(claimant.key, 1.0, tuple(listed)))
        book.changed(None, ledger.members.get(claimant.key))
    lags: list[float] = []
    async with LoopWatch(interval=0.01, observe=lags.append):
        await asyncio.sleep(0.05)
        started = time.process_time()
        if elsewhere:
            evaluations = Evaluations(book, ledger.members.of_url, keep)
            evaluations.poke()
            await evaluations.idle()
            verdict = evaluations.latest(URL)
        else:
            verdict = book.evaluate(URL)
        spent = time.process_time() - started
        await asyncio.sleep(0.05)
    assert verdict is not None
    return spent, max(lags, default=0.0), len(verdict.sets)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=25_000)
    parser.add_argument("--groups", type=int, default=10)
    args = parser.parse_args(argv)
    bound = unmatched_book.MAX_SETS_WEIGHED
    print(f"{args.jobs} queued jobs with a label each, {args.groups} groups of 64 labels")
    print(f"{'where':>14} {'label sets weighed':>18} {'CPU':>8} {'worst loop lag':>15}")
    for elsewhere in (False, True):
        for weighed in (args.jobs, bound):
            spent, lag, sets = asyncio.run(one(args.jobs, args.groups, elsewhere, weighed))
            where = "book's thread" if elsewhere else "event loop"
            print(f"{where:>14} {sets:>18} {spent:7.2f}s {lag * 1000:13.0f}ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
