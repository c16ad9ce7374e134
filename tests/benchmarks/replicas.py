"""Benchmark: 1, 2 and 3 replicas with ``--sharding`` over N quiet groups, on the testbed's
real control plane with the fake Gitea (tests/support/fake_gitea.py), and the hand-over
times of a SIGKILL and of a rolling restart. It prints figures and asserts nothing.

Each group is repo-scoped on a repository of its own, so each is a capacity domain of its
own and the domains spread evenly. Who holds how many domains is read from each replica's
info lines ("serving domains" and "gave domains away", each with ``held``).

- per replica count: each replica's CPU (cores), RSS and Gitea requests per second over
  ``--window`` seconds once every domain is held;
- SIGKILL of one of the largest count: seconds until the others hold every domain again;
- rolling restart (as a Deployment's maxSurge 1 does: start a new replica, then SIGTERM an
  old one, for each old one): per step, seconds until the stopped replica's domains are held
  by the others, and until the newcomer holds its share.

    python -m tests.benchmarks.replicas [--groups 600] [--namespaces 20] [--window 60]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from tests.benchmarks import common
from tests.support import manifests
from tests.support.fake_gitea import GroupScope, SimulatedGitea
from tests.support.launcher import OPERATOR_NS, OperatorProcess
from tests.support.testbed import allow_leases
from tests.testbed.sandbox import Sandbox

LABEL = "ubuntu-latest"
GITEA_REQUESTS = "gitea_runner_operator_gitea_requests_total"


def held(op: OperatorProcess) -> int:
    """Domains the replica says it holds, by its latest info line (0 before any)."""
    count = 0
    for line in op.log().splitlines():
        if '"held"' not in line:
            continue
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if "held" in event:  # gains, losses and step-downs all say what is left
                count = int(event["held"])
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
    with contextlib.ExitStack() as stack:
        yield [replica(sandbox, namespaces, stack) for _ in range(n)]


STARTED: list[OperatorProcess] = []  # every replica, for --logs


def replica(
    sandbox: Sandbox, namespaces: list[str], stack: contextlib.ExitStack
) -> OperatorProcess:
    op = stack.enter_context(common.operator(sandbox, namespaces, "--sharding", leader_elect=True))
    STARTED.append(op)
    return op


def measure(ops: list[OperatorProcess], fake: SimulatedGitea, window: float) -> None:
    before = [(op.cpu_seconds(), common.total(op.metrics(), GITEA_REQUESTS)) for op in ops]
    fake_before, t0 = fake.requests, time.monotonic()
    time.sleep(window)
    elapsed = time.monotonic() - t0
    for i, (op, (cpu0, req0)) in enumerate(zip(ops, before, strict=True)):
        cpu = (op.cpu_seconds() - cpu0) / elapsed
        requests = (common.total(op.metrics(), GITEA_REQUESTS) - req0) / elapsed
        print(
            f"  replica {i}: {held(op):5d} domains  CPU {cpu:.3f} cores  "
            f"RSS {op.rss_mb():6.1f} MB  Gitea {requests:6.2f} req/s",
            flush=True,
        )
    print(f"  the fake Gitea saw {(fake.requests - fake_before) / elapsed:.2f} req/s in all")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=600)
    parser.add_argument("--namespaces", type=int, default=20)
    parser.add_argument("--window", type=float, default=60.0, help="steady-state seconds")
    parser.add_argument("--most", type=int, default=3, help="replicas at the most")
    parser.add_argument("--poll-interval", default="15s")
    parser.add_argument("--logs", help="copy every replica's log into this directory")
    args = parser.parse_args(argv)

    owner = f"rep-{uuid.uuid4().hex[:4]}"
    fake = SimulatedGitea()
    namespaces = [f"{owner}-{i:03d}" for i in range(args.namespaces)]
    with Sandbox(gitea=False, harness_node=False) as sandbox:
        kube = common.install(sandbox)
        allow_leases(kube, OPERATOR_NS, ["list", "delete"])  # not in manifests/ yet
        fake.start(None)
        try:
            for ns in namespaces:
                common.team(kube, ns, "registration-token", "api-token")
            for i in range(args.groups):
                ns, name, repo = namespaces[i % len(namespaces)], f"g{i:04d}", f"r{i:04d}"
                fake.group(ns, name, GroupScope(owner, repo, (LABEL,)))
                body = common.group(name, owner, fake.url, [LABEL], pollInterval=args.poll_interval)
                body["spec"] |= {"scope": "repo", "repo": repo}
                manifests.apply(kube, body, namespace=ns)
            print(f"{args.groups} quiet groups, one domain each", flush=True)
            for n in range(1, args.most + 1):
                with replicas(sandbox, namespaces, n) as ops:
                    took = until_held(ops, args.groups)
                    print(f"{n} replica(s): every domain held after {_s(took)}", flush=True)
                    time.sleep(30)  # the first polls of the groups just taken
                    measure(ops, fake, args.window)
            handovers(sandbox, namespaces, args.groups, args.most)
            print(f"most domains held at once while waiting: {MOST[0]} of {args.groups}")
        finally:
            fake.stop()
            if args.logs:  # the sandbox's directory goes with it
                Path(args.logs).mkdir(parents=True, exist_ok=True)
                for op in STARTED:
                    if op.log_path is not None:
                        shutil.copy(op.log_path, args.logs)
    return 0


def handovers(sandbox: Sandbox, namespaces: list[str], total: int, n: int) -> None:
    with contextlib.ExitStack() as stack:
        ops = [replica(sandbox, namespaces, stack) for _ in range(n)]
        until_held(ops, total)
        victim = max(ops, key=held)
        victim.kill()
        ops.remove(victim)
        took = until_held(ops, total, limit=120)
        print(f"SIGKILL of 1 of {n}: its domains held again after {_s(took)}", flush=True)
        ops.append(replica(sandbox, namespaces, stack))
        until_held(ops, total)
        for old in list(ops):  # rolling: a new one first, then the old one stops
            new = replica(sandbox, namespaces, stack)
            joined = until_held([*ops, new], total, limit=120)
            sigterm = time.monotonic()
            old.stop()  # returns once it has exited: it released its Lease before
            ops.remove(old)
            ops.append(new)
            moved = until_held(ops, total, limit=120)
            after = None if moved is None else time.monotonic() - sigterm
            print(
                f"rolling step: newcomer holds its share {_s(joined)} after its start "
                f"was seen; the stopped one's domains held again {_s(after)} after SIGTERM",
                flush=True,
            )


def _s(seconds: float | None) -> str:
    return "never (limit)" if seconds is None else f"{seconds:.1f} s"


if __name__ == "__main__":
    raise SystemExit(main())
