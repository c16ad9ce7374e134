"""Benchmark: the cost of the cross-group accounting alone, without a cluster (pure code).

1 org group plus ``--repos`` repo groups sharing one label, ``--jobs-per-repo`` queued jobs
in each repository. Prints the time of one family assignment, of a reconcile's report and
read when nothing changed, and of a full round in which every group's capacity changes once
(each group reports, then reads its share: the worst case of a fill).

    python -m tests.benchmarks.accounting_cost [--repos 1000] [--jobs-per-repo 2]
"""

from __future__ import annotations

import argparse
import time

from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.reconcile.capacity.accounting import Answer, Claimant
from gitea_runner_operator.reconcile.capacity.ledger import Ledger

URL = "https://gitea.test"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repos", type=int, default=1000)
    parser.add_argument("--jobs-per-repo", type=int, default=2)
    args = parser.parse_args(argv)
    labels = frozenset({"ubuntu-latest"})
    jobs = [
        ActionJob(
            id=i * args.jobs_per_repo + k,
            labels=("ubuntu-latest",),
            status="queued",
            url=f"{URL}/api/v1/repos/acme/r{i}/actions/jobs/{i * args.jobs_per_repo + k}",
        )
        for i in range(args.repos)
        for k in range(args.jobs_per_repo)
    ]
    by_repo: dict[int, list[ActionJob]] = {}
    for job in jobs:
        by_repo.setdefault(job.id // args.jobs_per_repo, []).append(job)
    org = Claimant("ops/org", Scope.ORG, "acme", None, labels, 0, 10_000)
    repos = [
        Claimant(f"t{i}/r", Scope.REPO, "acme", f"r{i}", labels, 0, 10) for i in range(args.repos)
    ]
    ledger = Ledger()
    ledger.report(URL, org, Answer(org.key, 1.0, jobs))
    for i, c in enumerate(repos):
        ledger.report(URL, c, Answer(c.key, 1.0, by_repo[i]))
    t = time.perf_counter()
    ledger.share(org.key)
    first = time.perf_counter() - t
    t = time.perf_counter()
    for c in repos:
        ledger.report(URL, c, Answer(c.key, 1.0, by_repo[int(c.repo[1:])]))  # type: ignore[index]
        ledger.share(c.key)
    unchanged = (time.perf_counter() - t) / len(repos)
    t = time.perf_counter()
    for i, c in enumerate(repos):  # each group created its runners: capacity changed
        busy = Claimant(c.key, c.scope, c.org, c.repo, labels, args.jobs_per_repo, 10 - 2)
        ledger.report(URL, busy, Answer(c.key, 1.0, by_repo[i]))
        ledger.share(c.key)
    round_ = time.perf_counter() - t
    print(f"1 org + {args.repos} repo groups, {len(jobs)} queued jobs")
    print(f"one family assignment: {first * 1000:.1f} ms")
    print(f"a reconcile's report + share, nothing changed: {unchanged * 1e6:.1f} us")
    print(f"a round where every group's capacity changed: {round_:.2f} s "
          f"({round_ / len(repos) * 1000:.1f} ms per reconcile, "
          f"{ledger.computations} assignments)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
