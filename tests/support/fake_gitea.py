"""A fake Gitea for the scale benchmarks, and the runners it pretends to have.

A real Gitea cannot queue thousands of jobs in seconds (each workflow push is parsed and
scheduled), so the scale benchmarks serve the part of Gitea's API the operator reads:
organisation and repository lookups, ``/actions/jobs`` (by status, paginated, ``total_count``)
and ``/actions/runners`` (list, get, disable, delete) at org and repo scope. Jobs carry the
``url`` Gitea gives them, from which the operator reads the repository.

The runners are simulated too, from what the cluster shows: a runner Pod that kwok runs is
registered (in its group's scope, with its group's labels) ``start_delay`` seconds after it is
first seen Running; an idle registered runner takes the oldest queued job it can run (labels
and scope, as Gitea matches them), which runs ``job_seconds`` and then completes; the
ephemeral registration goes when its job is done or its Pod is gone. When its job is done,
the runner process would exit: the fake sets its Pod's phase to Succeeded (the Job controller
then completes the runner Job), so a Pod lives exactly as long as its runner would.
Everything here is a stand-in, said so in docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.testbed.kube import KubeClient

SELECTOR = "gitea.bpg.pw/managed-by=gitea-runner-operator"
GROUP_LABEL = "gitea.bpg.pw/runnergroup-name"


@dataclass
class Job:
    id: int
    owner: str
    repo: str
    labels: tuple[str, ...]
    status: str = "queued"  # queued, in_progress, success
    runner_id: int = 0
    runner_name: str = ""
    queued_at: float = field(default_factory=time.monotonic)
    started_at: float | None = None
    done_at: float | None = None


@dataclass
class Runner:
    id: int
    name: str
    owner: str
    repo: str | None  # None: an org runner
    labels: tuple[str, ...]
    namespace: str = ""
    job: int | None = None
    disabled: bool = False


@dataclass(frozen=True)
class GroupScope:
    owner: str
    repo: str | None
    labels: tuple[str, ...]


class _Server(ThreadingHTTPServer):
    """A client that gave up on a request (its timeout, an overloaded operator) is counted,
    not printed as a traceback: at 2,000 groups one such minute buried a benchmark's output."""

    daemon_threads = True
    # socketserver's default backlog is 5: a replica taking a thousand groups found its
    # connections refused by the fake, not by anything a real Gitea does.
    request_queue_size = 1024
    abandoned = 0

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.abandoned += 1


class SimulatedGitea:
    """Gitea's Actions API over HTTP, with runners simulated from the cluster's Pods."""

    def __init__(self, job_seconds: float = 60.0, start_delay: float = 0.0) -> None:
        self.job_seconds = job_seconds
        self.start_delay = start_delay
        self.lock = threading.Lock()
        self.jobs: dict[int, Job] = {}
        self.runners: dict[int, Runner] = {}
        self.groups: dict[tuple[str, str], GroupScope] = {}  # (namespace, group) -> scope
        self.requests = 0
        self._ids = 0
        self._pods_seen: dict[str, float] = {}
        # Per runner Pod name, when the fake did what (monotonic seconds): "running" (first
        # seen Running), "registered", "took", "done" (its job), "succeeded" (Pod patched).
        # And how long each pass of the simulation loop took: its own share of the delays.
        self.trace: dict[str, dict[str, float]] = {}
        self.loop_seconds: list[float] = []
        # Runner Pods deleted (or gone) while their runner ran a job: busy runners touched.
        self.busy_lost: set[str] = set()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=16)

    # -- set-up ---------------------------------------------------------------------------

    def start(self, kube: KubeClient | None = None) -> None:
        serve = threading.Thread(target=self._server.serve_forever, daemon=True)
        serve.start()
        self._threads.append(serve)
        if kube is not None:
            sim = threading.Thread(target=self._simulate, args=(kube,), daemon=True)
            sim.start()
            self._threads.append(sim)

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def group(self, namespace: str, name: str, scope: GroupScope) -> None:
        self.groups[(namespace, name)] = scope

    def queue(self, owner: str, repo: str, labels: tuple[str, ...], n: int = 1) -> list[int]:
        with self.lock:
            ids = []
            for _ in range(n):
                self._ids += 1
                self.jobs[self._ids] = Job(self._ids, owner, repo, labels)
                ids.append(self._ids)
            return ids

    @property
    def abandoned(self) -> int:
        """Requests whose client closed the connection before the answer."""
        return self._server.abandoned

    def count(self, status: str) -> int:
        with self.lock:
            return sum(1 for j in self.jobs.values() if j.status == status)

    def busy_runners(self) -> int:
        with self.lock:
            return sum(1 for r in self.runners.values() if r.job is not None)

    # -- the runners ----------------------------------------------------------------------

    def _mark(self, pod: str, what: str, at: float) -> None:
        self.trace.setdefault(pod, {}).setdefault(what, at)

    def _simulate(self, kube: KubeClient) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                pods = kube.get("/api/v1/pods", labelSelector=SELECTOR)["items"]
            except Exception:
                time.sleep(1)
                continue
            now = time.monotonic()
            running: dict[str, tuple[str, str]] = {}
            for pod in pods:
                meta = pod["metadata"]
                if (pod.get("status") or {}).get("phase") == "Running" and not meta.get(
                    "deletionTimestamp"
                ):
                    running[meta["name"]] = (meta["namespace"], meta["labels"].get(GROUP_LABEL))
            finished: list[tuple[str, str]] = []
            with self.lock:
                for name, (ns, group) in running.items():
                    first = self._pods_seen.setdefault(name, now)
                    self._mark(name, "running", first)
                    scope = self.groups.get((ns, group))
                    if scope is None or now - first < self.start_delay:
                        continue
                    if not any(r.name == name for r in self.runners.values()):
                        self._ids += 1
                        self.runners[self._ids] = Runner(
                            self._ids, name, scope.owner, scope.repo, scope.labels, ns
                        )
                        self._mark(name, "registered", now)
                for name in [n for n in self._pods_seen if n not in running]:
                    del self._pods_seen[name]
                for runner in self.runners.values():  # a Pod gone while its job still ran
                    if runner.job is not None and runner.name not in running:
                        self.busy_lost.add(runner.name)
                for rid, runner in list(self.runners.items()):
                    job = self.jobs.get(runner.job) if runner.job is not None else None
                    if job is not None and now - (job.started_at or now) >= self.job_seconds:
                        job.status, job.done_at = "success", now
                        self._mark(runner.name, "done", now)
                        del self.runners[rid]  # ephemeral: gone with its one job
                        finished.append((runner.namespace, runner.name))
                    elif runner.name not in running and job is None:
                        del self.runners[rid]
                self._dispatch(now)
            # The runners exit: their Pods succeed (in parallel: one at a time, the fake
            # itself would be what spreads a wave's ends over a minute).
            list(self._pool.map(lambda pod: self._succeed(kube, *pod), finished))
            self.loop_seconds.append(time.monotonic() - began)
            time.sleep(0.5)

    def _succeed(self, kube: KubeClient, namespace: str, name: str) -> None:
        with contextlib.suppress(Exception):  # gone already
            kube.patch(
                f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                {"status": {"phase": "Succeeded"}},
            )
            with self.lock:
                self._mark(name, "succeeded", time.monotonic())

    def _dispatch(self, now: float) -> None:
        queued = sorted((j for j in self.jobs.values() if j.status == "queued"), key=lambda j: j.id)
        idle = [r for r in self.runners.values() if r.job is None and not r.disabled]
        for runner in idle:
            for job in queued:
                if job.status != "queued" or not set(job.labels) <= set(runner.labels):
                    continue
                if runner.owner != job.owner or runner.repo not in (None, job.repo):
                    continue
                job.status, job.started_at = "in_progress", now
                job.runner_id, job.runner_name = runner.id, runner.name
                runner.job = job.id
                self._mark(runner.name, "took", now)
                break

    # -- the API --------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._answer(fake.route("GET", self.path))

            def do_PATCH(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                self._answer(fake.route("PATCH", self.path, body))

            def do_DELETE(self) -> None:
                self._answer(fake.route("DELETE", self.path))

            def _answer(self, result: tuple[int, Any]) -> None:
                status, payload = result
                data = b"" if status == 204 else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def route(self, method: str, raw: str, body: Any = None) -> tuple[int, Any]:
        self.requests += 1
        parts = urlsplit(raw)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        path = [p for p in parts.path.split("/") if p][2:]  # after /api/v1
        with self.lock:
            if path[:1] == ["user"]:
                return 200, {"login": "bench"}
            if path[:1] == ["orgs"] and len(path) >= 2:
                owner, repo, rest = path[1], None, path[2:]
            elif path[:1] == ["repos"] and len(path) >= 3:
                owner, repo, rest = path[1], path[2], path[3:]
            else:
                return 404, {"message": "not found"}
            if not rest:
                return 200, {"id": 1, "name": repo or owner}
            if rest[:2] == ["actions", "jobs"]:
                return 200, self._jobs(owner, repo, query)
            if rest[:2] == ["actions", "runners"]:
                return self._runners(method, owner, repo, rest[2:], query, body)
            return 404, {"message": "not found"}

    def _page(self, items: list[Any], query: dict[str, str]) -> list[Any]:
        page, limit = int(query.get("page", "1")), int(query.get("limit", "50"))
        return items[(page - 1) * limit : page * limit]

    def _jobs(self, owner: str, repo: str | None, query: dict[str, str]) -> dict[str, Any]:
        status = query.get("status", "queued")
        wanted = {"completed": "success"}.get(status, status)
        jobs = [
            j
            for j in self.jobs.values()
            if j.owner == owner and (repo is None or j.repo == repo) and j.status == wanted
        ]
        jobs.sort(key=lambda j: j.id, reverse=query.get("order") == "desc")
        return {
            "jobs": [self._job_json(j) for j in self._page(jobs, query)],
            "total_count": len(jobs),
        }

    def _job_json(self, job: Job) -> dict[str, Any]:
        return {
            "id": job.id,
            "run_id": job.id,
            "name": f"j{job.id}",
            "labels": list(job.labels),
            "status": job.status,
            "runner_id": job.runner_id,
            "runner_name": job.runner_name,
            "url": f"{self.url}/api/v1/repos/{job.owner}/{job.repo}/actions/jobs/{job.id}",
        }

    def _runners(
        self,
        method: str,
        owner: str,
        repo: str | None,
        rest: list[str],
        query: dict[str, str],
        body: Any,
    ) -> tuple[int, Any]:
        mine = [r for r in self.runners.values() if r.owner == owner and r.repo == repo]
        if not rest:
            return 200, {
                "runners": [self._runner_json(r) for r in self._page(mine, query)],
                "total_count": len(mine),
            }
        runner = self.runners.get(int(rest[0]))
        if runner is None or runner not in mine:
            return 404, {"message": "not found"}
        if method == "DELETE":
            if runner.job is not None:
                self.busy_lost.add(runner.name)
            del self.runners[runner.id]
            return 204, {}
        if method == "PATCH":
            runner.disabled = bool((body or {}).get("disabled"))
        return 200, self._runner_json(runner)

    @staticmethod
    def _runner_json(r: Runner) -> dict[str, Any]:
        return {
            "id": r.id,
            "name": r.name,
            "status": "online",
            "busy": r.job is not None,
            "ephemeral": True,
            "disabled": r.disabled,
            "labels": [{"name": label} for label in r.labels],
        }


def wait(predicate: Callable[[], bool], timeout: float, step: float = 0.5) -> float | None:
    """Seconds until ``predicate`` held, or None."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(step)
    return None
