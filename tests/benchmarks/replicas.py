"""Benchmark: 1, 2 and 3 replicas with ``--sharding`` over N quiet groups, on the testbed's
real control plane with the fake Gitea (tests/support/fake_gitea.py), and the hand-over
times of a SIGKILL and of a rolling restart. It prints figures and asserts nothing.

Each group is repo-scoped on a repository of its own, so each is a capacity domain of its
own and the domains spread evenly. Who holds how many domains is read from each replica's
info lines ("serving domains" and "gave domains away", each with ``held``).

- per replica count: each replica's CPU (cores), RSS, Gitea requests per second and watch
  events received per second (RunnerGroups, and runner Jobs and Pods: what the API server
  sends it, kept or dropped) over ``--window`` seconds once every domain is held;
- ``--global-toggle``: with ``--most`` replicas, a ``scope: global`` group whose token does
  not work is created and deleted every ``--toggle-every`` seconds for ``--toggle-for``
  seconds: how often a group moved to another replica (sampled every second);
- ``--handovers``, with jobs arriving at ``--rate`` per second throughout: SIGKILL of the
  replica holding most of ``--most``, seconds until the others hold every domain again; then
  a rolling restart (as a Deployment's maxSurge 1 does: start a new replica, then SIGTERM an
  old one, for each old one): per step, seconds until the stopped replica's domains are held
  by the others, and until the newcomer holds its share. For each, as for ``--rescale``:
  jobs queued, runner Jobs created and how many of them never ran a job (one too many
  each), the longest wait of a job, and busy runners touched;
- per replica count, the fill: one job queued in each of ``--fill`` groups at once, seconds
  until a runner Job exists for each, and until each job runs;
- ``--rescale``: jobs arriving at ``--rate`` per second while the replicas go 1 -> 3 -> 1
  (the two extra ones stop with SIGTERM): jobs queued, runner Jobs created (must be equal),
  the longest wait of a job, and busy runners touched (a runner's Pod gone while its job
  ran, or its registration deleted; must be 0).

Runners are simulated by the fake from the cluster's Pods (kwok runs them): a job runs
``--job-seconds`` and its Pod then succeeds.

- ``--families N`` adds N families, each an org group (an org of its own) and
  ``--family-repos K`` repo groups of that org (past 1, jobs also arrive in a repository
  only the org group serves), one domain each; the hand-over runs print their jobs'
  longest wait, and every run the ten slowest jobs with wall-clock times to read beside
  the replicas' logs (``--logs DIR``, ``--operator-arg=--log-level=debug``: each taken
  domain's trail). ``--no-rolling``: the SIGKILL alone.

    python -m tests.benchmarks.replicas [--groups 600] [--namespaces 20] [--window 60]
        [--fill 200] [--rescale] [--handovers] [--global-toggle] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.benchmarks import common
from tests.support import manifests
from tests.support.fake_gitea import GROUP_LABEL, SELECTOR, GroupScope, SimulatedGitea
from tests.support.launcher import OperatorProcess
from tests.testbed.kube import KubeClient
from tests.testbed.sandbox import Sandbox

LABEL = "ubuntu-latest"
GITEA_REQUESTS = "gitea_runner_operator_gitea_requests_total"
WATCH_EVENTS = "gitea_runner_operator_watch_events_received"
DOMAIN_INFO = "gitea_runner_operator_group_domain_info"


def events(op: OperatorProcess) -> tuple[float, float]:
    """Watch events the replica received so far: RunnerGroups', and runner Jobs' and Pods'."""
    metrics = op.metrics()
    groups = jobs_pods = 0.0
    for (name, labels), value in metrics.items():
        if name != WATCH_EVENTS:
            continue
        if dict(labels).get("resource") == "runnergroups":
            groups += value
        else:
            jobs_pods += value
    return groups, jobs_pods


_HELD: dict[int, tuple[int, int]] = {}  # id(op) -> (bytes of its log read, held count)


def held(op: OperatorProcess) -> int:
    """Domains the replica says it holds, by its latest info line (0 before any). The log
    is read on from where the last call stopped: at 2,000 groups a replica's log runs to
    megabytes, and this is asked every 0.2 s."""
    if op.log_path is None:
        return 0
    offset, count = _HELD.get(id(op), (0, 0))
    with open(op.log_path, "rb") as f:
        f.seek(offset)
        chunk = f.read()
    end = chunk.rfind(b"\n") + 1  # a line still being written is read next time
    for line in chunk[:end].decode(errors="replace").splitlines():
        if '"held"' not in line:
            continue
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if "held" in event:  # gains, losses and step-downs all say what is left
                count = int(event["held"])
    _HELD[id(op)] = (offset + end, count)
    return count


MOST = [0]  # the most domains the live replicas ever held together: more than N is overlap


def until_held(ops: list[OperatorProcess], total: int, limit: float = 300) -> float | None:
    """Seconds until the replicas together hold ``total`` domains and each holds some."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        counts = [held(op) for op in ops if op.proc.poll() is None]
        MOST[0] = max(MOST[0], sum(counts))
        if sum(counts) == total and all(counts):
            return time.monotonic() - start
        time.sleep(0.2)
    return None


@contextlib.contextmanager
def replicas(sandbox: Sandbox, namespaces: list[str], n: int) -> Iterator[list[OperatorProcess]]:
    """``n`` replicas started together, as a Deployment's Pods start."""
    with contextlib.ExitStack() as stack:
        starting = [
            common.operator(sandbox, namespaces, "--sharding", *EXTRA, leader_elect=True)
            for _ in range(n)
        ]
        with ThreadPoolExecutor(n) as pool:
            ops = list(pool.map(lambda cm: cm.__enter__(), starting))
        for cm in starting:
            stack.push(cm.__exit__)
        STARTED.extend(ops)
        yield ops


STARTED: list[OperatorProcess] = []  # every replica, for --logs
EXTRA: list[str] = []  # --operator-arg: more arguments for every replica


def replica(
    sandbox: Sandbox, namespaces: list[str], stack: contextlib.ExitStack
) -> OperatorProcess:
    started = common.operator(sandbox, namespaces, "--sharding", *EXTRA, leader_elect=True)
    op = stack.enter_context(started)
    STARTED.append(op)
    return op


FIGURES: dict[str, Any] = {"cost": {}, "fill": {}}  # for --json (and the plot)
FAMILY_ORGS: set[str] = set()  # --families: the orgs of the families of two groups


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def measure(ops: list[OperatorProcess], fake: SimulatedGitea, window: float) -> None:
    before = [(op.cpu_seconds(), common.total(op.metrics(), GITEA_REQUESTS)) for op in ops]
    events_before = [events(op) for op in ops]
    fake_before, abandoned, t0 = fake.requests, fake.abandoned, time.monotonic()
    load0 = load_average()
    time.sleep(window)
    elapsed = time.monotonic() - t0
    rows = []
    for i, (op, (cpu0, req0)) in enumerate(zip(ops, before, strict=True)):
        cpu = (op.cpu_seconds() - cpu0) / elapsed
        requests = (common.total(op.metrics(), GITEA_REQUESTS) - req0) / elapsed
        (g0, o0), (g1, o1) = events_before[i], events(op)
        got = {"groups": (g1 - g0) / elapsed, "jobs_pods": (o1 - o0) / elapsed, "total": o1}
        rows.append(
            {"held": held(op), "cpu": cpu, "rss": op.rss_mb(), "gitea": requests, "events": got}
        )
        print(
            f"  replica {i}: {held(op):5d} domains  CPU {cpu:.3f} cores  "
            f"RSS {op.rss_mb():6.1f} MB  Gitea {requests:6.2f} req/s  events received: "
            f"{got['groups']:.2f}/s RunnerGroup, {got['jobs_pods']:.2f}/s Job and Pod "
            f"({o1:.0f} Job and Pod events since its start)",
            flush=True,
        )
    seen = (fake.requests - fake_before) / elapsed
    gave_up = (fake.abandoned - abandoned) / elapsed
    print(
        f"  the fake Gitea saw {seen:.2f} req/s in all ({gave_up:.2f}/s given up by the "
        f"client before the answer); load {load0:.1f} -> {load_average():.1f}"
    )
    FIGURES["cost"][len(ops)] = {
        "replicas": rows,
        "fake": seen,
        "abandoned": gave_up,
        "load": [load0, load_average()],
    }


@dataclass
class Seen:
    """A runner Job as the watcher first saw it."""

    at: float  # monotonic
    namespace: str
    name: str
    group: str


class RunnerJobs:
    """Every runner Job seen (by uid), from a list every half second: a Job lives at least a
    job's length, so none is missed."""

    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube
        self.seen: dict[str, Seen] = {}  # uid -> first sight
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RunnerJobs:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                now = time.monotonic()
                for job in self._kube.get("/apis/batch/v1/jobs", labelSelector=SELECTOR)["items"]:
                    meta = job["metadata"]
                    if meta["uid"] not in self.seen:
                        group = (meta.get("labels") or {}).get(GROUP_LABEL, "")
                        self.seen[meta["uid"]] = Seen(now, meta["namespace"], meta["name"], group)
            time.sleep(0.5)

    def made_since(self, start: float) -> list[Seen]:
        return [s for s in list(self.seen.values()) if s.at >= start]

    def since(self, start: float) -> int:
        return len(self.made_since(start))


class Arrivals:
    """Jobs queued at ``rate`` per second into random groups, on a thread, for as long as the
    ``with`` block runs."""

    def __init__(
        self, fake: SimulatedGitea, groups: list[tuple[str, str]], rate: float, seed: int
    ) -> None:
        self._fake, self._groups, self._rate = fake, groups, rate
        self._rng = random.Random(seed)  # noqa: S311 - a benchmark's spread, not a secret
        self.queued: list[int] = []
        self.start = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Arrivals:
        self.start = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            owner, repo = self._rng.choice(self._groups)
            self.queued.extend(self._fake.queue(owner, repo, (LABEL,)))
            time.sleep(1 / self._rate)


def verdict(
    name: str,
    fake: SimulatedGitea,
    jobs: RunnerJobs,
    arrivals: Arrivals,
    busy_before: set[str],
    since: float | None = None,
) -> dict[str, Any]:
    """What a run of arrivals came to, once every job it queued runs: jobs, runner Jobs
    created since it began, which of those ran a job and which never did (each of those is
    one runner too many), the longest and median wait, and busy runners touched. ``since``
    (a SIGKILL's monotonic time): also until each runner Job existed counted from the kill
    for the jobs queued before it, which is how the issue states the recovery bound (the
    Lease duration plus one poll after the kill); a job queued before the kill has already
    waited for the dead replica's next poll, which no hand-over can give back."""
    queued = arrivals.queued
    drained = wait(lambda: all(fake.jobs[i].started_at is not None for i in queued), 300)
    time.sleep(2)  # the watcher's next list
    made = jobs.made_since(arrivals.start)
    took = {pod for pod, marks in list(fake.trace.items()) if "took" in marks}
    idle = [s for s in made if not any(pod.startswith(f"{s.name}-") for pod in took)]
    ours = {fake.jobs[i].runner_name for i in queued if fake.jobs[i].runner_name}
    # A runner Job of this run that took a job queued before it (an earlier run's straggler)
    earlier = [
        s for s in made if s not in idle and not any(p.startswith(f"{s.name}-") for p in ours)
    ]
    waits = sorted(
        (fake.jobs[i].started_at or time.monotonic()) - fake.jobs[i].queued_at for i in queued
    )
    # Until the runner Job that ran it existed (first seen by the watcher, every 0.5 s): what
    # the operator answers for, without the runner's own start (its Pod, its registration).
    by_name = {s.name: s for s in made}
    until_job = sorted(
        max(0.0, seen.at - fake.jobs[i].queued_at)
        for i in queued
        if (seen := by_name.get(fake.jobs[i].runner_name.rsplit("-", 1)[0])) is not None
    )
    # Each job until its runner Job existed, slowest first, with wall-clock times to read
    # beside the replicas' logs (--logs): owner/repo, queued at, runner Job seen at.
    wall = time.time() - time.monotonic()
    slowest = sorted(
        (
            (seen.at - fake.jobs[i].queued_at, i, seen)
            for i in queued
            if (seen := by_name.get(fake.jobs[i].runner_name.rsplit("-", 1)[0])) is not None
        ),
        key=lambda t: -t[0],
    )[:10]
    family_until_job = max(
        (
            seen.at - fake.jobs[i].queued_at
            for i in queued
            if fake.jobs[i].owner in FAMILY_ORGS
            and (seen := by_name.get(fake.jobs[i].runner_name.rsplit("-", 1)[0])) is not None
        ),
        default=None,
    )
    since_kill = {
        i: seen.at - max(fake.jobs[i].queued_at, since)
        for i in queued
        if since is not None
        and (seen := by_name.get(fake.jobs[i].runner_name.rsplit("-", 1)[0])) is not None
    }
    families_since_kill = [t for i, t in since_kill.items() if fake.jobs[i].owner in FAMILY_ORGS]
    touched = sorted(fake.busy_lost - busy_before)
    result: dict[str, Any] = {
        "slowest": [
            {
                "job": i,
                "repository": f"{fake.jobs[i].owner}/{fake.jobs[i].repo}",
                "queued_at": _clock(fake.jobs[i].queued_at + wall),
                "runner_job_seen_at": _clock(seen.at + wall),
                "runner_job": f"{seen.namespace}/{seen.name}",
                "until_runner_job": round(took, 1),
            }
            for took, i, seen in slowest
        ],
        "families_longest_until_runner_job": family_until_job,
        "jobs": len(queued),
        "created": len(made),
        "ran_no_job": [f"{s.namespace}/{s.name}" for s in idle],
        "ran_an_earlier_job": len(earlier),
        "longest_wait": waits[-1] if waits else 0.0,
        "median_wait": waits[len(waits) // 2] if waits else 0.0,
        "longest_until_runner_job": until_job[-1] if until_job else None,
        "families_longest_wait": max(
            (
                (fake.jobs[i].started_at or time.monotonic()) - fake.jobs[i].queued_at
                for i in queued
                if fake.jobs[i].owner in FAMILY_ORGS
            ),
            default=None,
        ),
        "touched": touched,
        "drained_s": drained,
        "longest_since_kill": max(since_kill.values(), default=None),
        "families_longest_since_kill": max(families_since_kill, default=None),
    }
    print(
        f"{name}: {result['jobs']} jobs, {result['created']} runner Jobs created, "
        f"{len(idle)} of them ran no job {result['ran_no_job'][:10]}, {len(earlier)} ran a job "
        f"queued before this run; longest wait "
        f"{result['longest_wait']:.1f} s (median {result['median_wait']:.1f} s), until its "
        f"runner Job existed {_s(result['longest_until_runner_job'])}; busy runners "
        f"touched {len(touched)}; every job running {_s(drained)} after the arrivals stopped"
        + (
            f"; jobs of families of an org and repo groups: longest wait "
            f"{_s(result['families_longest_wait'])}, until its runner Job existed "
            f"{_s(family_until_job)}"
            if FAMILY_ORGS
            else ""
        ),
        flush=True,
    )
    if since is not None:
        print(
            f"  until its runner Job existed, counted from the kill for jobs queued before it: "
            f"longest {_s(result['longest_since_kill'])}, jobs of families "
            f"{_s(result['families_longest_since_kill'])}",
            flush=True,
        )
    for row in result["slowest"][:5]:
        print(f"  slow: {row}", flush=True)
    FIGURES.setdefault("runs", {})[name] = result
    return result


def fill(
    fake: SimulatedGitea,
    jobs: RunnerJobs,
    groups: list[tuple[str, str]],
    ops: list[OperatorProcess],
    count: int,
) -> None:
    """One job queued in each of ``count`` groups at once: until a runner Job exists for
    each (created), and until each job runs (taken); and the runner Job and Pod events each
    replica received meanwhile (narrowed by the API server, each event reaches the one
    replica whose buckets hold it: the sum is what every replica would receive unnarrowed)."""
    n = len(ops)
    received_before = [events(op)[1] for op in ops]
    start = time.monotonic()
    ids = [fake.queue(owner, repo, (LABEL,))[0] for owner, repo in groups[:count]]
    done = wait(lambda: jobs.since(start) >= count, 300)
    created = None if done is None else time.monotonic() - start
    done = wait(lambda: all(fake.jobs[i].started_at is not None for i in ids), 300)
    taken = None if done is None else time.monotonic() - start
    time.sleep(5)  # a surplus runner Job would show by now
    made = jobs.made_since(start)
    took = {pod for pod, marks in list(fake.trace.items()) if "took" in marks}
    idle = sum(1 for s in made if not any(pod.startswith(f"{s.name}-") for pod in took))
    print(
        f"  fill of {count} jobs in {count} groups: runner Jobs created after {_s(created)}, "
        f"every job running after {_s(taken)}; {len(made)} runner Jobs, {idle} ran no job",
        flush=True,
    )
    wait(lambda: fake.count("in_progress") == 0, 300)  # the next step starts quiet
    time.sleep(3)  # the Pods' last events
    received = [events(op)[1] - before for op, before in zip(ops, received_before, strict=True)]
    total = sum(received) or 1.0
    print(
        "  runner Job and Pod events received during the fill: "
        + ", ".join(f"replica {i}: {r:.0f} ({r / total:.0%})" for i, r in enumerate(received))
        + f"; {total:.0f} in all",
        flush=True,
    )
    FIGURES["fill"][n] = {
        "jobs": count,
        "created_s": created,
        "taken_s": taken,
        "created": len(made),
        "ran_no_job": idle,
        "events_received": received,
    }


def wait(predicate: Any, limit: float) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.2)
    return None


def rescale(
    sandbox: Sandbox,
    namespaces: list[str],
    fake: SimulatedGitea,
    jobs: RunnerJobs,
    groups: list[tuple[str, str]],
    rate: float,
    phase: float,
    total: int,
) -> None:
    """Jobs arrive at ``rate`` per second into random groups while the replicas go 1 -> 3 ->
    1, ``phase`` seconds at each count once every domain is held (``total`` domains)."""
    busy_before = set(fake.busy_lost)
    steps: list[str] = []
    with contextlib.ExitStack() as stack:
        ops = [replica(sandbox, namespaces, stack)]
        steps.append(f"1 replica: every domain held after {_s(until_held(ops, total))}")
        with Arrivals(fake, groups, rate, seed=38) as arrivals:
            time.sleep(phase)
            extra = [replica(sandbox, namespaces, stack) for _ in range(2)]
            steps.append(f"-> 3: held again after {_s(until_held([*ops, *extra], total))}")
            time.sleep(phase)
            sigterm = time.monotonic()
            for op in extra:
                op.stop()
            back = until_held(ops, total)
            after = None if back is None else time.monotonic() - sigterm
            steps.append(f"-> 1: held again {_s(after)} after SIGTERM")
            time.sleep(phase)
        for line in steps:
            print(f"  {line}", flush=True)
        verdict(f"rescale 1 -> 3 -> 1 at {rate:g} jobs/s", fake, jobs, arrivals, busy_before)
    FIGURES["rescale_steps"] = steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=600)
    parser.add_argument("--namespaces", type=int, default=20)
    parser.add_argument("--window", type=float, default=60.0, help="steady-state seconds")
    parser.add_argument("--most", type=int, default=3, help="replicas at the most")
    parser.add_argument(
        "--counts", help="replica counts to measure (e.g. 3 or 1,3; default 1..most)"
    )
    parser.add_argument("--poll-interval", default="15s")
    parser.add_argument("--logs", help="copy every replica's log into this directory")
    parser.add_argument("--fill", type=int, default=200, help="groups given one job each")
    parser.add_argument("--job-seconds", type=float, default=20.0)
    parser.add_argument("--rescale", action="store_true", help="1 -> 3 -> 1 under load")
    parser.add_argument("--rate", type=float, default=2.0, help="jobs/s during --rescale")
    parser.add_argument("--phase", type=float, default=60.0, help="seconds per count")
    parser.add_argument("--handovers", action="store_true", help="SIGKILL and rolling restart")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument(
        "--global-toggle", action="store_true", help="toggle a global group: domains moved"
    )
    parser.add_argument("--toggle-every", type=float, default=10.0)
    parser.add_argument("--toggle-for", type=float, default=120.0)
    parser.add_argument(
        "--families", type=int, default=0, help="families of an org and a repo group each"
    )
    parser.add_argument(
        "--family-repos",
        type=int,
        default=1,
        help="repo groups under each family's org group; past 1, jobs also arrive in a "
        "repository of the org that no repo group serves (the org group's runners)",
    )
    parser.add_argument(
        "--no-cost", action="store_true", help="skip the per-count cost and fill (hand-overs only)"
    )
    parser.add_argument(
        "--no-rolling", action="store_true", help="--handovers: the SIGKILL only, no rolling"
    )
    parser.add_argument(
        "--operator-arg",
        action="append",
        default=[],
        help="one more argument for every replica (e.g. --operator-arg=--log-level=debug)",
    )
    args = parser.parse_args(argv)
    EXTRA.extend(args.operator_arg)

    owner = f"rep-{uuid.uuid4().hex[:4]}"
    fake = SimulatedGitea(job_seconds=args.job_seconds)
    namespaces = [f"{owner}-{i:03d}" for i in range(args.namespaces)]
    repos: list[tuple[str, str]] = []
    with Sandbox(gitea=False, harness_node=False) as sandbox:
        kube = common.install(sandbox)
        fake.start(kube)  # runners simulated from the Pods kwok runs
        jobs = RunnerJobs(kube).__enter__()
        try:
            for ns in namespaces:
                common.team(kube, ns, "registration-token", "api-token")
            for i in range(args.groups):
                ns, name, repo = namespaces[i % len(namespaces)], f"g{i:04d}", f"r{i:04d}"
                fake.group(ns, name, GroupScope(owner, repo, (LABEL,)))
                body = common.group(name, owner, fake.url, [LABEL], pollInterval=args.poll_interval)
                body["spec"] |= {"scope": "repo", "repo": repo}
                manifests.apply(kube, body, namespace=ns)
                repos.append((owner, repo))
            for j in range(args.families):
                ns, org = namespaces[j % len(namespaces)], f"{owner}-f{j:03d}"
                FAMILY_ORGS.add(org)
                fake.group(ns, f"fo{j:03d}", GroupScope(org, None, (LABEL,)))
                body = common.group(f"fo{j:03d}", org, fake.url, [LABEL])
                body["spec"]["pollInterval"] = args.poll_interval
                manifests.apply(kube, body, namespace=ns)
                for k in range(args.family_repos):  # the first keeps the name of one alone
                    name, repo = (f"fr{j:03d}", "r") if k == 0 else (f"fr{j:03d}-{k}", f"r{k}")
                    fake.group(ns, name, GroupScope(org, repo, (LABEL,)))
                    body = common.group(name, org, fake.url, [LABEL])
                    body["spec"] |= {"scope": "repo", "repo": repo}
                    body["spec"]["pollInterval"] = args.poll_interval
                    manifests.apply(kube, body, namespace=ns)
                    repos.append((org, repo))
                if args.family_repos > 1:  # and a repository only the org group serves
                    repos.append((org, "o"))
            print(
                f"{args.groups} quiet groups, one domain each, and {args.families} families "
                f"of an org group and {args.family_repos} repo group(s) each",
                flush=True,
            )
            domains = args.groups + args.families  # a family is one domain
            counts = [int(c) for c in args.counts.split(",")] if args.counts else []
            for n in counts or range(1, 0 if args.no_cost else args.most + 1):
                with replicas(sandbox, namespaces, n) as ops:
                    took = until_held(ops, domains)
                    print(f"{n} replica(s): every domain held after {_s(took)}", flush=True)
                    time.sleep(30)  # the first polls of the groups just taken
                    measure(ops, fake, args.window)
                    if args.fill:
                        picked = random.Random(n).sample(repos, len(repos))  # noqa: S311
                        fill(fake, jobs, picked, ops, args.fill)
            if args.rescale:
                rescale(sandbox, namespaces, fake, jobs, repos, args.rate, args.phase, domains)
            if args.handovers:
                handovers(
                    sandbox, namespaces, fake, jobs, repos, args.most, args.rate, domains,
                    args.no_rolling,
                )  # fmt: skip
            if args.global_toggle:
                toggle(sandbox, kube, namespaces, fake.url, owner, args)
            print(f"most domains held at once while waiting: {MOST[0]} of {len(repos)}")
            FIGURES["most_held"] = MOST[0]
            if args.json:
                Path(args.json).write_text(json.dumps(FIGURES, indent=1))
        finally:
            jobs.__exit__()
            fake.stop()
            if args.logs:  # the sandbox's directory goes with it
                Path(args.logs).mkdir(parents=True, exist_ok=True)
                for op in STARTED:
                    if op.log_path is not None:
                        shutil.copy(op.log_path, args.logs)
    return 0


def handovers(
    sandbox: Sandbox,
    namespaces: list[str],
    fake: SimulatedGitea,
    jobs: RunnerJobs,
    groups: list[tuple[str, str]],
    n: int,
    rate: float,
    total: int,
    no_rolling: bool = False,
) -> None:
    """With jobs arriving at ``rate`` per second: SIGKILL of the replica holding most, then
    a rolling restart of all ``n`` (a new one first, then an old one stops, per old one).
    ``total``: the domains (a family is one)."""
    with contextlib.ExitStack() as stack:
        ops = [replica(sandbox, namespaces, stack) for _ in range(n)]
        until_held(ops, total)
        busy_before = set(fake.busy_lost)
        with Arrivals(fake, groups, rate, seed=39) as arrivals:
            time.sleep(20)  # jobs running on the victim too
            victim = max(ops, key=held)
            print(f"SIGKILL of {victim.log_path} at {_clock(time.time())} UTC", flush=True)
            killed_at = time.monotonic()
            victim.kill()
            ops.remove(victim)
            took = until_held(ops, total, limit=120)
            print(f"SIGKILL of 1 of {n}: its domains held again after {_s(took)}", flush=True)
            FIGURES["sigkill_s"] = took
            time.sleep(20)
        verdict(
            f"SIGKILL of 1 of {n} at {rate:g} jobs/s",
            fake,
            jobs,
            arrivals,
            busy_before,
            since=killed_at,
        )
        if no_rolling:
            return
        ops.append(replica(sandbox, namespaces, stack))
        until_held(ops, total)
        busy_before = set(fake.busy_lost)
        rolling: list[dict[str, float | None]] = []
        with Arrivals(fake, groups, rate, seed=40) as arrivals:
            for old in list(ops):  # rolling: a new one first, then the old one stops
                new = replica(sandbox, namespaces, stack)
                joined = until_held([*ops, new], total, limit=120)
                sigterm = time.monotonic()
                old.stop()  # returns once it has exited: it released its Lease before
                ops.remove(old)
                ops.append(new)
                moved = until_held(ops, total, limit=120)
                after = None if moved is None else time.monotonic() - sigterm
                rolling.append({"newcomer_s": joined, "stopped_s": after})
                print(
                    f"rolling step: newcomer holds its share {_s(joined)} after its start "
                    f"was seen; the stopped one's domains held again {_s(after)} after SIGTERM",
                    flush=True,
                )
            time.sleep(20)
        verdict(f"rolling restart of {n} at {rate:g} jobs/s", fake, jobs, arrivals, busy_before)
        FIGURES["rolling"] = rolling


def owners(ops: list[OperatorProcess]) -> dict[str, int]:
    """Which replica serves each group now, by the ``group_domain_info`` series each exports
    for the groups it serves (a hand-over drops the old replica's)."""
    out: dict[str, int] = {}
    for i, op in enumerate(ops):
        with contextlib.suppress(OSError):
            for (name, labels), value in op.metrics().items():
                if name == DOMAIN_INFO and value:
                    tags = dict(labels)
                    out[f"{tags.get('namespace')}/{tags.get('runnergroup')}"] = i
    return out


def toggle(
    sandbox: Sandbox,
    kube: KubeClient,
    namespaces: list[str],
    url: str,
    owner: str,
    args: argparse.Namespace,
) -> None:
    """A tenant creates and deletes a ``scope: global`` group, whose token the fake Gitea
    does not know, every ``--toggle-every`` seconds: the groups that moved between the
    replicas (a group's serving replica, sampled every second, changed)."""
    total = args.groups + args.families
    ns = namespaces[0]
    path = f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups/everything"
    with replicas(sandbox, namespaces, args.most) as ops:
        until_held(ops, total)
        time.sleep(10)  # the first polls of the groups just taken
        seen = owners(ops)
        moves = 0
        started, toggles, next_toggle = time.monotonic(), 0, 0.0
        end = args.toggle_for + 2 * args.toggle_every
        while (now := time.monotonic() - started) < end:
            if now >= next_toggle and now < args.toggle_for:
                if toggles % 2 == 0:
                    body = common.group("everything", owner, url, [LABEL])
                    body["spec"] |= {"scope": "global"}
                    del body["spec"]["org"]
                    manifests.apply(kube, body, namespace=ns)
                else:
                    kube.delete(path)
                toggles += 1
                next_toggle += args.toggle_every
            elif now >= args.toggle_for and toggles % 2 == 1:
                kube.delete(path)
                toggles += 1
            for key, where in owners(ops).items():
                if key in seen and seen[key] != where:
                    moves += 1
                seen[key] = where
            time.sleep(1.0)
        print(
            f"global group toggled {toggles} times in {args.toggle_for:.0f} s with {args.most} "
            f"replicas: {moves} moves of a group to another replica (of {total} groups)",
            flush=True,
        )
        FIGURES["global_toggle"] = {"toggles": toggles, "groups_moved": moves}


def _clock(wall: float) -> str:
    """A wall-clock time as the replicas' logs print it (UTC, to the millisecond)."""
    return time.strftime("%H:%M:%S", time.gmtime(wall)) + f".{int(wall % 1 * 1000):03d}"


def _s(seconds: float | None) -> str:
    return "never (limit)" if seconds is None else f"{seconds:.1f} s"


if __name__ == "__main__":
    raise SystemExit(main())
