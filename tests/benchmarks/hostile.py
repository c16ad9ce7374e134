"""Benchmark: what a hostile tenant can do to everyone else (issue 24).

On the testbed (real API server, controller-manager, kwok) one operator, holding the Lease,
serves GROUPS healthy groups (a fake Gitea, fake_gitea.py, in a process of its own,
hostile_gitea.py, with one job queued every EVERY seconds, round robin, each announced by a
correctly signed webhook delivery that process sends as Gitea would). Phase "baseline" runs
that alone; phase "attack" runs it while hostile tenants, in their own namespaces with their
own RunnerGroups, attack at the same time:

- the webhook: forged deliveries built to make the pre-signature parse expensive, and
  connections that send headers and then nothing (hostile_servers.WebhookAttack);
- ``spec.gitea.url`` at a hostile server (hostile_servers.HostileForge): a page of 5 million
  tiny items (Gitea and Forgejo job lists), 200 MiB, no answer, 403, ever new 200-character
  repository names;
- Secrets of 1 MiB named by templates;
- a cache take-over: a group ``db`` turns ``spec.cache`` on, then off, where another
  application owns ``db-cache`` objects (they must still be there afterwards);
- many CA bundle variants (ConfigMaps: a few certificates, each in many texts);
- unmatched jobs (issue 36 row 1): ``--label-groups`` groups of 64 labels each on a hostile
  server listing 4,000 queued jobs, each with a label of its own, all new every 5 s;
- issue 45: ``--caps-groups`` groups of one tenant, each on its own org of a hostile server
  answering pages of jobs at every cap (64 labels of 45 characters, 10,000 listed)
  (``caps``); ``--url-groups`` groups on as many Gitea URLs, each listing 4,000 queued jobs of
  a label each (``urls``); a hook with a wrong secret sending from Gitea's own address
  (``wronghook``); a group deleted, then its token's opt-in label removed (``revoke``: how
  long after the revocation the token was still used).

It prints, per phase, the healthy groups' queued -> runner Job p50 and p99 (the Job as a
watch of its namespace reports it: before issue 45's pickup work, a list every 0.3 s, which
added up to 0.3 s and the lists' own time, growing with the run, to each figure), the genuine
deliveries' answers, the operator's peak RSS (VmHWM of its process), the longest gap between
answers of a /healthz probe sent every 100 ms (the longest event-loop stall, give or take
the probe's own 100 ms), the event loop's lag p50 / p99 / max per phase (from the operator's
``event_loop_lag_seconds`` histogram: the max is the bound of the highest bucket reached),
and the Lease's renewals missed (gaps between renewTimes longer than the 10 s renew
deadline) and leader changes. ``--plot FILE`` (matplotlib, the ``bench``
extra) draws RSS and per-job latency over time.

What is the harness and what is the operator: the healthy groups' Gitea, the attackers and
the hostile forge each run in a process of their own, so none shares an interpreter (a GIL)
with another or with this process's measuring threads (until issue 45's pickup round the
healthy Gitea and the senders of its deliveries and of the wrong-secret hook were threads of
this process). The healthy Gitea stamps each job when it queues it and sends its delivery
itself; the run prints each genuine delivery's round trip as Gitea saw it, and the cores
each process used per phase (cpu_share.py: the operator, the healthy Gitea, the hostile
forge, the webhook attacker, this process, the testbed's processes and the rest of the
machine, which on a shared machine is others' work). The hostile forge builds each job page
once and serves its bytes to every group asking (the same answers as before). No runner
takes a healthy job here, so a healthy queue grows with the run: each healthy group has a
Gitea organisation of its own (``--healthy-orgs own``, the default), whose queue stays
within one page in both phases. Until issue 45's pickup round they shared one
(``--healthy-orgs shared``): a refresh then listed 1-2 pages in the baseline and 2-6 under
attack, which made the attack's "Gitea's answer" grow with the run, not with the attack.

The run prints the API server's writes a second by verb and resource per phase and its own
time per Job create (its /metrics): what the attacks cost the API server every tenant shares.
With ``--operator-cpu N`` the operator runs alone on CPU N and everything else (the API
server, the Gitea servers, the attackers, the benchmark) on the other CPUs, as in a cluster,
where the operator does not share its node's cores with the control plane: on the 2-core
machine, unpinned, the operator's CPU under attack competes with the API server's.

With ``--spans DIR`` the operator logs at debug level and the pickup is broken down step by
step per phase (hostile_spans.py): where a healthy job waits under attack.

    python -m tests.benchmarks.hostile [--groups 20] [--baseline 60] [--attack 90] [--plot F]
        [--spans DIR] [--memory-limit MIB] [--healthy-orgs shared|own] [--operator-cpu N]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import os
import threading
import time
import urllib.request
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.benchmarks import common
from tests.benchmarks.cpu_share import CpuShare
from tests.benchmarks.hostile_gitea import GiteaProcess
from tests.benchmarks.hostile_memory import MemoryCgroup, memory_args
from tests.benchmarks.hostile_plot import plot
from tests.benchmarks.hostile_report import (
    RENEW_DEADLINE,
    api_figures,
    lag_buckets,
    log_counts,
    peak_rss,
    report,
)
from tests.benchmarks.hostile_servers import Remote
from tests.benchmarks.hostile_spans import keep_spans, print_spans
from tests.benchmarks.hostile_tenants import (
    apply_evil_groups,
    foreign_objects,
    prepare_evil,
    revoke_while_deleting,
    set_cache,
)
from tests.support import manifests
from tests.support.launcher import OPERATOR_NS, OperatorProcess
from tests.support.testbed import make_secret
from tests.testbed.kube import KubeClient
from tests.testbed.sandbox import Sandbox

LEASE_NS = OPERATOR_NS
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/gitea-runner-operator"
ATTACKS = "webhook,forge,secrets,cache,ca,labels,caps,urls,wronghook,revoke"
SELECTOR = "gitea.bpg.pw/managed-by=gitea-runner-operator"
GROUP_LABEL = "gitea.bpg.pw/runnergroup-name"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--every", type=float, default=0.5, help="seconds between jobs")
    parser.add_argument("--baseline", type=float, default=60)
    parser.add_argument("--attack", type=float, default=90)
    parser.add_argument("--poll", default="5s")
    parser.add_argument("--secrets", type=int, default=12, help="Secrets of 1 MiB")
    parser.add_argument("--ca-groups", type=int, default=20)
    parser.add_argument("--label-groups", type=int, default=8, help="groups of 64 labels")
    parser.add_argument("--caps-groups", type=int, default=5, help="one tenant's, at the caps")
    parser.add_argument("--url-groups", type=int, default=40, help="groups on a URL each")
    parser.add_argument(
        "--wronghook-every", type=float, default=0.2, help="seconds between wrong-secret hooks"
    )
    parser.add_argument(
        "--attacks",
        default=ATTACKS,
        help=f"which attacks to run (comma-separated, default all: {ATTACKS})",
    )
    parser.add_argument(
        "--healthy-orgs",
        choices=("shared", "own"),
        default="own",
        help="the healthy groups have a Gitea organisation each (default), or share one, "
        "as before issue 45's pickup round: its queue then holds every healthy job queued "
        "since the start (no runner takes one here), 1-2 pages in the baseline, 2-6 under attack",
    )
    parser.add_argument(
        "--shared-address",
        action="store_true",
        help="the attackers send from Gitea's address (127.0.0.1), as behind one ingress",
    )
    parser.add_argument(
        "--memory-limit",
        type=int,
        default=0,
        help="MiB: run the operator in a memory cgroup of this limit (cgroup v1, as root), "
        "with the tenant budget a chart install of that limit gets (40 %%)",
    )
    parser.add_argument(
        "--tenant-memory-budget",
        type=int,
        default=0,
        help="MiB, for the operator's flag (default: 40 %% of --memory-limit, if given)",
    )
    parser.add_argument(
        "--malloc-arena-max", default="", help="MALLOC_ARENA_MAX for the operator (unset)"
    )
    parser.add_argument(
        "--memprobe",
        type=Path,
        help="run the operator under tracemalloc; snapshots mid-attack and at its end here",
    )
    parser.add_argument(
        "--operator-cpu",
        type=int,
        help="the operator alone on this CPU, all else (the API server, the Gitea servers, "
        "the attackers, this process) on the others, as in a cluster",
    )
    parser.add_argument("--plot", help="draw RSS and latency over time into this PNG")
    parser.add_argument(
        "--spans",
        type=Path,
        help="run the operator with debug logs, keep its log in this directory and print "
        "where a healthy job's pickup waits, step by step, per phase (hostile_spans.py)",
    )
    parser.add_argument(
        "--cpuprobe",
        type=Path,
        help="profile the operator's main thread during the attack into this directory",
    )
    args = parser.parse_args(argv)
    operator_cpus = None
    if args.operator_cpu is not None:  # before any thread or process starts: they inherit it
        operator_cpus = {args.operator_cpu}
        os.sched_setaffinity(0, os.sched_getaffinity(0) - operator_cpus)

    fake, forge = GiteaProcess(), Remote("--forge")
    forge_url = forge.line()
    attack, counts = None, {}
    healthy = [f"ok-{i}" for i in range(4)]
    evil = ["evil-forge", "evil-secrets", "evil-ca", "evil-cache"]
    evil += ["evil-caps", "evil-urls", "evil-revoke"]  # issue 45
    with Sandbox(gitea=False, harness_node=False) as sandbox:
        kube = common.install(sandbox)
        try:
            hooks = {ns: uuid.uuid4().hex for ns in healthy}
            for ns in healthy + evil:  # each team its own token, as in a real cluster
                common.team(kube, ns, "registration-token", f"api-token-{ns}")
            for ns, secret in hooks.items():
                make_secret(kube, ns, "hook", {"secret": secret})
            prepare_evil(kube, args)
            uids = foreign_objects(kube, "evil-cache")
            extra = memory_args(args) + (("--log-level", "debug") if args.spans else ())
            env = {"MALLOC_ARENA_MAX": args.malloc_arena_max} if args.malloc_arena_max else {}
            with MemoryCgroup(args.memory_limit) as cgroup, common.operator(
                sandbox, healthy + evil, *extra, leader_elect=True, cpuprobe=args.cpuprobe,
                memprobe=args.memprobe,
                env=env, cgroup=cgroup.path if args.memory_limit else None, cpus=operator_cpus,
            ) as op:  # fmt: skip
                run = Run(kube, op, fake, healthy, hooks, args)
                run.share.track("hostile forge", forge.proc.pid)
                for i in range(args.groups):
                    spec = {
                        "pollInterval": args.poll,
                        "maxActiveRunners": 200,
                        "webhook": {"secretRef": {"name": "hook", "key": "secret"}},
                    }
                    body = common.group(f"h{i}", run.org_of(i), fake.url, [f"h{i}"], **spec)
                    manifests.apply(kube, body, run.namespace_of(i))
                time.sleep(15)
                run.start()
                run.phase("baseline", args.baseline)
                if "webhook" in args.attacks.split(","):
                    shared = ("--shared-address",) if args.shared_address else ()
                    attack = Remote("--webhook", str(op.webhook_port), *shared)
                    run.share.track("webhook attacker", attack.proc.pid)
                if args.cpuprobe:
                    op.snapshot()  # sampling starts, before the hostile groups' first passes
                apply_evil_groups(kube, fake, forge_url, args)
                if "wronghook" in args.attacks.split(","):
                    fake.wrong_hooks(op.webhook_port, args.wronghook_every)
                run.phase("attack", args.attack / 2)
                if args.memprobe:
                    op.snapshot()  # DIR/snap-1.pickle: where the memory is mid-attack
                set_cache(kube, enabled=False)
                if "revoke" in args.attacks.split(","):
                    run.revoked_at = revoke_while_deleting(kube)
                run.phase("attack", args.attack / 2)
                counts = attack.finish() if attack is not None else {}
                if args.memprobe:
                    op.snapshot()  # DIR/snap-2.pickle
                run.attack_ended = run.now()
                if args.cpuprobe:
                    op.snapshot()  # what the attack cost: DIR/cpu-1.txt
                run.mark("drain")
                run.drain(30)
                run.stop()
                run.adopt(fake.finish())
                counts |= log_counts(op.log())
                run.peak = peak_rss(run)
                run.cgroup = cgroup.figures()
                after = foreign_objects(kube, "evil-cache")
                if args.spans:
                    keep_spans(run, op, args.spans)
                load = os.getloadavg()
        finally:
            fake.finish()  # at once if finished above
            counts |= forge.finish()
    report(run, counts, uids, after, load, args)
    if args.spans:
        print_spans(args.spans)
    if args.plot:
        plot(run.rss, run.latencies, (run.attack_started, run.attack_ended), args.plot)
    return 0


class Run:
    """Has the healthy groups' Gitea (its own process, hostile_gitea.py) queue their jobs and
    send their deliveries, and watches the operator: runner Jobs, /healthz, the Lease and the
    process's RSS."""

    def __init__(
        self,
        kube: KubeClient,
        op: OperatorProcess,
        fake: GiteaProcess,
        namespaces: list[str],
        hooks: dict[str, str],
        args: argparse.Namespace,
    ) -> None:
        self.kube, self.op, self.fake, self.args = kube, op, fake, args
        self.namespaces, self.hooks = namespaces, hooks
        self.t0, self.wall0 = time.monotonic(), time.time()  # now() + wall0: the wall clock
        self.queued: dict[str, list[tuple[float, str]]] = collections.defaultdict(list)
        self.created: dict[str, dict[str, float]] = collections.defaultdict(dict)
        self.deliveries: dict[str, dict[str, int]] = {}
        # phase -> each genuine delivery's queued -> answered, seconds (Gitea's side)
        self.round_trips: dict[str, list[float]] = collections.defaultdict(list)
        self.answers: list[float] = []
        self.rss: list[tuple[float, float]] = []
        self.renewals: list[tuple[float, str, str]] = []
        self.attack_started: float | None = None
        self.attack_ended: float | None = None
        self.cpu: dict[str, tuple[float, float]] = {}  # phase -> (started at, CPU seconds)
        self.lag: dict[str, dict[float, float]] = {}  # phase -> lag buckets when it started
        # phase -> the API server's request counts and Job-create latency buckets then
        self.api: dict[str, dict[tuple[str, ...], float]] = {}
        self.peak = 0.0
        self.cgroup = ""
        self.revoked_at: float | None = None  # wall time the revoke attack revoked its token
        self.wrong: dict[str, int] = {}
        self._n = 0
        self._stop = threading.Event()
        self.share = CpuShare()  # who used the machine's cores, per phase
        self.share.track("operator", op.proc.pid, threads=True)
        self.share.track("healthy Gitea", fake.proc.pid)
        self.share.track("bench", os.getpid())
        self._threads = [
            threading.Thread(target=f, daemon=True) for f in (self._probe, self._watch)
        ]

    def namespace_of(self, i: int) -> str:
        return self.namespaces[i % len(self.namespaces)]

    def org_of(self, i: int) -> str:
        """The healthy group's Gitea organisation (``--healthy-orgs``)."""
        return "healthy" if self.args.healthy_orgs == "shared" else f"healthy-{i}"

    def start(self) -> None:
        for thread in self._threads:
            thread.start()
        for ns in self.namespaces:  # not joined: a watch ends only with its stream
            threading.Thread(target=self._watch_jobs, args=(ns,), daemon=True).start()

    def mark(self, name: str) -> None:
        """Where a phase starts: the operator's CPU and its loop-lag buckets so far."""
        if name not in self.cpu:
            self.share.mark(name, self.now())
        self.cpu.setdefault(name, (self.now(), self.op.cpu_seconds()))
        if name not in self.lag:
            with contextlib.suppress(Exception):
                self.lag[name] = lag_buckets(self.op.metrics())
        if name not in self.api:
            with contextlib.suppress(Exception):
                self.api[name] = api_figures(self.kube.text("/metrics"))

    def stop(self) -> None:
        self.mark("end")
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=40)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def phase(self, name: str, seconds: float) -> None:
        self.mark(name)
        if name == "attack" and self.attack_started is None:
            self.attack_started = self.now()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            i = self._n % self.args.groups
            self._n += 1
            secret = self.hooks[self.namespace_of(i)]
            self.fake.job(f"h{i}", secret, self.op.webhook_port, name, self.org_of(i))
            # For drain() meanwhile; adopt() puts Gitea's own stamps in their place.
            self.queued[f"h{i}"].append((self.now(), name))
            time.sleep(self.args.every)

    def adopt(self, record: dict[str, Any]) -> None:
        """What the healthy groups' Gitea recorded: when it queued each job (its own clock,
        time.monotonic, the machine's one), its deliveries' answers and round trips, and the
        wrong-secret hook's answers."""
        if not record:
            return  # the Gitea process died: the bench's own stamps stay
        self.queued = collections.defaultdict(list)
        for group, stamps in record["queued"].items():
            self.queued[group] = [(at - self.t0, phase) for at, phase in stamps]
        self.deliveries = {phase: dict(counts) for phase, counts in record["answers"].items()}
        for phase, queued, answered in record["round_trips"]:
            self.round_trips[phase].append(answered - queued)
        self.wrong = dict(record["wrong"])

    def drain(self, seconds: float) -> None:
        """Wait until every queued job has its runner Job (or ``seconds`` pass)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end and any(
            len(self.created[g]) < len(q) for g, q in self.queued.items()
        ):
            time.sleep(0.5)

    def _probe(self) -> None:
        url = f"http://127.0.0.1:{self.op.health_port}/healthz"
        while not self._stop.is_set():
            with contextlib.suppress(Exception), urllib.request.urlopen(url, timeout=60) as r:
                r.read()
                self.answers.append(self.now())
            time.sleep(0.1)

    def _watch_jobs(self, namespace: str) -> None:
        """When each runner Job of ``namespace`` appeared: a watch's ADDED event, read as it
        arrives. (Until issue 45's pickup work this listed the Jobs every 0.3 s, which added
        up to 0.3 s plus the lists' own time to every figure; the lists grew with the run's
        Jobs and slowed with the API server's load, and made most of the attack's p99. Until
        its third round the watch ended every 60 s and the Jobs were listed again before the
        next: a Job made meanwhile was seen 50-120 ms late, the slowest job of a run at
        +60 s, +180 s and +240 s.) A watch that ends goes on from the last version seen, at
        once; only a failed one lists again."""
        path = f"/apis/batch/v1/namespaces/{namespace}/jobs"
        version: str | None = None
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                if version is None:
                    listed = self.kube.get(path, labelSelector=SELECTOR)
                    for job in listed["items"]:
                        self._seen(job)
                    version = listed["metadata"]["resourceVersion"]
                events = self.kube.watch(
                    path, labelSelector=SELECTOR, resourceVersion=version, timeoutSeconds=600
                )
                for event in events:
                    if event.get("type") == "ERROR":  # the version is gone: list again
                        break
                    job = event.get("object") or {}
                    version = job.get("metadata", {}).get("resourceVersion", version)
                    if event.get("type") == "ADDED":
                        self._seen(job)
                else:
                    continue  # the stream ended: on from the last version, at once
            version = None
            time.sleep(0.1)

    def _seen(self, job: dict[str, Any]) -> None:
        group = job["metadata"]["labels"].get(GROUP_LABEL, "")
        self.created[group].setdefault(job["metadata"]["name"], self.now())

    def _watch(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                spec = self.kube.get(LEASE).get("spec") or {}
                renew = str(spec.get("renewTime"))
                if not self.renewals or self.renewals[-1][1] != renew:
                    self.renewals.append((self.now(), renew, str(spec.get("holderIdentity"))))
                self.rss.append((self.now(), self.op.rss_mb()))
            time.sleep(0.3)

    @property
    def latencies(self) -> list[tuple[float, float, str]]:
        """(queued at, queued -> runner Job, phase) per job, matched in order per group."""
        out = []
        for group, queued in self.queued.items():
            created = sorted(self.created[group].values())
            for (at, phase), seen in zip(queued, created, strict=False):
                out.append((at, max(0.0, seen - at), phase))
        return out

    def lease(self) -> tuple[int, float, int]:
        """(renewals missed, longest gap between renewTimes, holder changes) while watched."""
        times = [_parse(r) for _, r, _ in self.renewals]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        if times:  # a renewal still missing at the end counts too
            gaps.append(time.time() - times[-1] if self._stop.is_set() else 0.0)
        holders = [h for _, _, h in self.renewals]
        changes = sum(1 for a, b in itertools.pairwise(holders) if a != b)
        return sum(1 for g in gaps if g > RENEW_DEADLINE), max(gaps, default=0.0), changes

    def stall(self, phase: str) -> float:
        start = self.attack_started or self.now()
        gaps = [
            (b - a)
            for a, b in zip(self.answers, self.answers[1:], strict=False)
            if (b > start) == (phase == "attack")
        ]
        return max(gaps, default=0.0)


def _parse(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


if __name__ == "__main__":
    raise SystemExit(main())
