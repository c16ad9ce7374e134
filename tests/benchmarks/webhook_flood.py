"""Benchmark: a flood of wrongly signed webhook deliveries against a working operator.

On the testbed (real API server, real Gitea, kwok): one team with GROUPS groups that have
their own webhook secrets (so a forged delivery naming their organisation makes the
receiver fetch and try those secrets, the expensive path), the operator holding the Lease.
Phase "quiet" pushes JOBS workflows, 2 s apart, and measures queued -> runner Job per job
(the poll path: pollInterval POLL, no hook in Gitea); phase "flood" does the same while
FLOOD deliveries of SIZE bytes, signed with a wrong secret, are posted CONCURRENCY at a
time to /hooks/gitea. Prints the poll-path latencies of both phases, the answers' status
codes (a 5xx is a failure of the promise), the Lease's renewals during the flood, and the
operator's CPU and RSS.

    python -m tests.benchmarks.webhook_flood [--flood 2000] [--concurrency 50] [--size 1048000]

``--receiver-only`` needs no testbed: the operator's webhook receiver alone, in this process,
with GROUPS group secrets covering the flood's organisation, the flood from a separate
process; it prints the receiver's event-loop lag (what the Lease renewal and the polls would
wait), sampled every 10 ms, and the status codes.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import secrets
import threading
import time
import uuid
from typing import Any

import aiohttp

from tests.benchmarks import common
from tests.support import manifests
from tests.support.testbed import make_secret
from tests.support.webhook import FakeOperator
from tests.testbed.gitea_api import GiteaAPI
from tests.testbed.sandbox import Sandbox

LEASE_NS = "gitea-runner-operator"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flood", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--size", type=int, default=(1 << 20) - 1024)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=6)
    parser.add_argument("--poll", default="5s")
    parser.add_argument("--receiver-only", action="store_true")
    parser.add_argument("--client", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client:
        flood = Flood(args.client, "acme", args.flood, args.concurrency, args.size)
        flood.run()
        print(json.dumps({"statuses": dict(flood.statuses), "duration": flood.duration}))
        return 0
    if args.receiver_only:
        asyncio.run(receiver_only(args))
        return 0

    with Sandbox(harness_node=False) as sandbox:
        kube = common.install(sandbox)
        assert sandbox.gitea_url and sandbox.gitea_token
        gitea = GiteaAPI(sandbox.gitea_url, token=sandbox.gitea_token)
        ns = org = f"flood-{uuid.uuid4().hex[:6]}"
        gitea.create_org(org)
        gitea.create_repo(org, "app")
        common.team(kube, ns, gitea.registration_token("org", owner=org), sandbox.gitea_token)
        for i in range(args.groups + 1):  # a secret per group: the expensive path
            make_secret(kube, ns, f"hook-{i}", {"secret": uuid.uuid4().hex})
        extra = ("--leader-elect", "--leader-election-namespace", LEASE_NS)
        with common.operator(sandbox, [ns], *extra) as op:

            def spec(i: int) -> dict[str, Any]:
                return {
                    "pollInterval": args.poll,
                    "maxActiveRunners": 50,
                    "webhook": {"secretRef": {"name": f"hook-{i}", "key": "secret"}},
                }

            for i in range(args.groups):
                manifests.apply(
                    kube, common.group(f"g{i}", org, sandbox.gitea_url, [f"fl{i}"], **spec(i)), ns
                )
            manifests.apply(
                kube,
                common.group("work", org, sandbox.gitea_url, ["flood"], **spec(args.groups)),
                ns,
            )
            gitea.push_workflow(org, "app", "seed.yml", _workflow("seed"))
            time.sleep(10)
            quiet = _measure(kube, gitea, ns, org, "quiet", args.jobs)
            flood = Flood(op.webhook_port, org, args.flood, args.concurrency, args.size)
            lease_before = _lease(kube)
            cpu_before = op.cpu_seconds()
            flood.start()
            loud = _measure(kube, gitea, ns, org, "flood", args.jobs)
            renewals = _renewals_while(kube, flood)
            flood.join()
            lease_after = _lease(kube)
            cpu = op.cpu_seconds() - cpu_before
            rss = op.rss_mb()
    print()
    print(f"{'phase':>6} {'jobs':>5} {'p50':>8} {'max':>8}")
    for name, lat in (("quiet", quiet), ("flood", loud)):
        if lat:
            print(f"{name:>6} {len(lat):>5} {common.percentile(lat, 0.5):7.2f}s {max(lat):7.2f}s")
    statuses = dict(sorted(flood.statuses.items()))
    fives = sum(n for s, n in statuses.items() if isinstance(s, int) and s >= 500)
    print(
        f"flood: {flood.sent} deliveries of {args.size} bytes, {args.concurrency} at a time, "
        f"in {flood.duration:.1f}s; answers {statuses}; 5xx: {fives}"
    )
    print(
        f"lease: holder {lease_before[0]} -> {lease_after[0]}, renewals seen during the "
        f"flood: {renewals}; operator CPU {cpu:.1f}s, RSS {rss:.0f} MiB"
    )
    return 0


async def receiver_only(args: argparse.Namespace) -> None:
    import logging
    import sys

    import structlog

    from gitea_runner_operator.api.runnergroup import Scope
    from gitea_runner_operator.webhook.routing import GroupDescriptor, SecretLocation
    from gitea_runner_operator.webhook.server import WebhookServer

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    groups = [
        GroupDescriptor(f"team/g{i}", "http://gitea.invalid", Scope.ORG, "acme", None,
                        frozenset({"x"}), SecretLocation("team", f"s{i}", "k"))
        for i in range(args.groups)
    ]  # fmt: skip

    async def provider(where: SecretLocation) -> bytes:
        return f"secret-{where.name}".encode()

    server = WebhookServer(
        "127.0.0.1", 0, FakeOperator(groups, secret_provider=provider), operator_secret=b"operator",
    )  # fmt: skip
    await server.start()
    lags: list[float] = []

    async def ticker() -> None:
        while True:
            t = time.monotonic()
            await asyncio.sleep(0.01)
            lags.append(time.monotonic() - t - 0.01)

    tick = asyncio.create_task(ticker())
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.benchmarks.webhook_flood", "--client", str(server.port),
        "--flood", str(args.flood), "--concurrency", str(args.concurrency),
        "--size", str(args.size), stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await proc.communicate()
    tick.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await tick
    await server.stop()
    result = json.loads(out)
    fives = sum(n for s, n in result["statuses"].items() if s.isdigit() and int(s) >= 500)
    print(
        f"receiver only, {args.groups} group secrets: {args.flood} deliveries of {args.size} "
        f"bytes, {args.concurrency} at a time, in {result['duration']:.1f}s; answers "
        f"{result['statuses']}; 5xx: {fives}; event-loop lag p50 "
        f"{common.percentile(lags, 0.5) * 1000:.1f} ms, p99 "
        f"{common.percentile(lags, 0.99) * 1000:.1f} ms, max {max(lags) * 1000:.1f} ms"
    )


def _workflow(name: str) -> str:
    """One job, run only by the push that adds this very file (every later push touches
    other paths), so each push queues exactly one job."""
    return (
        f"name: {name}\non:\n  push:\n    paths: ['.gitea/workflows/{name}.yml']\n"
        "jobs:\n  j:\n    runs-on: flood\n    steps: [{run: echo}]\n"
    )


def _measure(kube: Any, gitea: GiteaAPI, ns: str, org: str, tag: str, n: int) -> list[float]:
    """Push ``n`` workflows 2 s apart; per job, queued (as Gitea lists it) -> runner Job."""
    jobs_path = f"/apis/batch/v1/namespaces/{ns}/jobs"
    before = {j["metadata"]["name"] for j in kube.get(jobs_path)["items"]}
    known = {int(j["id"]) for j in gitea.list_jobs("org", org, status="queued")}
    queued_at: dict[int, float] = {}
    seen: dict[str, float] = {}
    t0, pushed, next_push = time.monotonic(), 0, 0.0
    while (len(seen) < n or pushed < n) and time.monotonic() - t0 < n * 2 + 90:
        now = time.monotonic()
        if pushed < n and now >= next_push:
            gitea.push_workflow(org, "app", f"{tag}{pushed}.yml", _workflow(f"{tag}{pushed}"))
            pushed, next_push = pushed + 1, now + 2.0
        for job in gitea.list_jobs("org", org, status="queued"):
            if int(job["id"]) not in known:
                queued_at.setdefault(int(job["id"]), time.monotonic())
        for item in kube.get(jobs_path)["items"]:
            name = item["metadata"]["name"]
            if name not in before and name.startswith("work-"):
                seen.setdefault(name, time.monotonic())
        time.sleep(0.1)
    starts, created = sorted(queued_at.values()), sorted(seen.values())
    return [max(0.0, c - q) for q, c in zip(starts, created, strict=False)]


def _lease(kube: Any) -> tuple[str, str]:
    lease = kube.get(
        f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/gitea-runner-operator"
    )
    spec = lease.get("spec") or {}
    return str(spec.get("holderIdentity")), str(spec.get("renewTime"))


def _renewals_while(kube: Any, flood: Flood) -> int:
    seen = set()
    while flood.is_alive():
        seen.add(_lease(kube)[1])
        time.sleep(1)
    return len(seen) - 1


class Flood(threading.Thread):
    """Posts wrongly signed deliveries from its own event loop (another thread, so the
    benchmark's own polling never waits for it)."""

    def __init__(self, port: int, org: str, count: int, concurrency: int, size: int) -> None:
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/hooks/gitea"
        head = json.dumps(
            {"action": "queued", "repository": {"full_name": f"{org}/app"}, "pad": ""}
        ).encode()
        self.body = head[:-2] + b"x" * max(0, size - len(head)) + b'"}'
        self.count, self.concurrency = count, concurrency
        self.statuses: collections.Counter[int | str] = collections.Counter()
        self.sent = 0
        self.duration = 0.0

    def run(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        started = time.monotonic()
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(self.count):
            queue.put_nowait(i)
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await asyncio.gather(*(self._worker(session, queue) for _ in range(self.concurrency)))
        self.duration = time.monotonic() - started

    async def _worker(self, session: aiohttp.ClientSession, queue: asyncio.Queue[int]) -> None:
        while not queue.empty():
            queue.get_nowait()
            headers = {
                "X-Gitea-Event": "workflow_job",
                "X-Gitea-Signature": secrets.token_hex(32),
                "X-Gitea-Delivery": str(uuid.uuid4()),
                "Content-Type": "application/json",
            }
            try:
                async with session.post(self.url, data=self.body, headers=headers) as resp:
                    await resp.read()
                    self.statuses[resp.status] += 1
            except Exception as exc:
                self.statuses[type(exc).__name__] += 1
            self.sent += 1


if __name__ == "__main__":
    raise SystemExit(main())
