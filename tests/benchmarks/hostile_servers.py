"""The hostile tenants' tools for tests/benchmarks/hostile.py: a forge that answers to hurt, and
clients that attack the webhook receiver without any secret.

``HostileForge`` is one loopback HTTP server; a tenant picks the attack by the path of its
``spec.gitea.url`` (``{url}/tiny``, ``/huge``, ``/hang``, ``/forbidden``, ``/longnames``):

- tiny: every ``/actions/`` list is one page of about 5 million ``{}`` (15 MB: under the
  byte cap, so only an item bound stops it); Forgejo's unpaged job list the same, bare;
- huge: a 200 MiB answer, sent as fast as the reader takes it;
- hang: the request is read and never answered;
- forbidden: 403 for everything;
- longnames: queued jobs in ever new repositories with 200-character names (what the ledger
  learns from), labels no group offers;
- labels (issue 36 row 1): ``LABEL_JOBS`` queued jobs over pages, each with a label of its
  own that no group offers, all new every ``LABEL_EVERY`` seconds (what the unmatched-jobs
  evaluation weighs).

Other paths (version, organisation and user look-ups) answer as a Gitea would, so the polls
get as far as the job lists. ``WebhookAttack`` runs, from its own thread and event loop,
forged deliveries built to make a pre-signature parse expensive and connections that send
headers, then nothing; it counts the answers.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import itertools
import json
import secrets
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import aiohttp

MODES = ("tiny", "huge", "hang", "forbidden", "longnames")
# Issue 45: a page of jobs at every per-item cap (64 labels of 45 characters), 10,000 listed.
CAPS_LABELS = 64
CAPS_TOTAL = 10_000
TINY_ITEMS = 5_000_000
LABEL_JOBS = 4_000
LABEL_EVERY = 5.0
HUGE_BYTES = 200 << 20
PAGES_KEPT = 1024  # answers kept built (_memo): a generation of labels' pages, and caps'
PREFIX = 1 << 16  # what the receiver's repository hint reads
# The attackers' own addresses (tenant Pods have theirs; Gitea sends from 127.0.0.1): the
# receiver caps bodies read at once per peer address, so the silent connections come from
# four addresses, four each.
FORGER = "127.0.0.2"
HOLDERS = ("127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6")

# Bodies that made the old repository hint rescan and re-parse its prefix per occurrence.
FORGED_BODIES = (
    b'"repository"' * 2730 + b":" + b" " * 32768 + b"{",
    (b'{"repository":{"a":[' + b'{"repository":{"b":[' * 4000)[:PREFIX],
    b'{"repository":{"x":[1,' + b'"repository": {"y":[2,' * 3000,
)


def _parse(query: str) -> dict[str, list[str]]:
    return urllib.parse.parse_qs(query)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """The operator hangs up on hostile answers: that is the point, not an error."""


class HostileForge:
    def __init__(self) -> None:
        self.stop_event = threading.Event()
        self.requests: collections.Counter[str] = collections.Counter()
        items = b"{}," * (TINY_ITEMS - 1) + b"{}"
        self.tiny = {
            "jobs": b'{"jobs":[' + items + b'],"total_count":%d}' % TINY_ITEMS,
            "runners": b'{"runners":[' + items + b'],"total_count":%d}' % TINY_ITEMS,
            "bare": b"[" + items + b"]",
        }
        self._names = itertools.count()
        self._pages: dict[tuple[object, str], bytes] = {}  # see _memo
        self.last: dict[str, float] = {}  # mode -> wall time of its latest request
        self._server = _QuietServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> None:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.stop_event.set()
        self._server.shutdown()
        self._server.server_close()

    def answer(self, mode: str, path: str, query: str = "") -> tuple[int, bytes] | None:
        """(status, body), or None for the hanging server."""
        if mode == "hang":
            return None
        if mode == "forbidden":
            return 403, b'{"message":"forbidden"}'
        if path.startswith("/api/forgejo/"):
            return 404, b'{"message":"not found"}'
        if "/actions/" not in path:
            return 200, b'{"id":1,"login":"evil","name":"evil","version":"1.26.0"}'
        if mode == "tiny":
            if "/runners/jobs" in path:
                return 200, self.tiny["bare"]
            return 200, self.tiny["runners" if "/runners" in path else "jobs"]
        if mode == "longnames" and "/actions/jobs" in path:
            return 200, json.dumps(self._long_jobs(50)).encode()
        if mode == "caps" and path.endswith("/actions/jobs"):
            return 200, self._memo(("caps", query), lambda: self._caps_jobs(_parse(query)))
        if mode == "revoke" and path.endswith("/actions/jobs") and "status=queued" in query:
            job = {"id": 1, "run_id": 1, "name": "j", "status": "queued", "labels": ["rv"],
                   "url": f"{self.url}/revoke/api/v1/repos/evil/app/actions/jobs/1"}  # fmt: skip
            return 200, json.dumps({"jobs": [job], "total_count": 1}).encode()
        if mode == "labels" and path.endswith("/actions/jobs"):
            generation = int(time.monotonic() // LABEL_EVERY)
            return 200, self._memo(
                (generation, query),
                lambda: json.dumps(self._label_jobs(_parse(query), generation)).encode(),
            )
        return 200, b'{"runners":[],"jobs":[],"total_count":0}'

    def _long_jobs(self, n: int) -> dict[str, Any]:
        jobs = []
        for _ in range(n):
            i = next(self._names)
            repo = f"r{i:08d}" + "x" * 191
            jobs.append(
                {"id": i + 1, "run_id": i + 1, "name": "j", "labels": ["nobody-offers-this"],
                 "status": "queued",
                 "url": f"{self.url}/longnames/api/v1/repos/evil/{repo}/actions/jobs/{i + 1}"}
            )  # fmt: skip
        return {"jobs": jobs, "total_count": n}

    def _caps_jobs(self, query: dict[str, list[str]]) -> bytes:
        """A full page of jobs, each at the caps: many such groups of one tenant are what
        the tenant memory budget bounds (issue 45)."""
        if query.get("status") != ["queued"]:
            return b'{"jobs":[],"total_count":0}'
        page, limit = int(query.get("page", ["1"])[0]), int(query.get("limit", ["50"])[0])
        jobs = []
        for i in range((page - 1) * limit + 1, page * limit + 1):
            labels = [f"{i:06d}-{k:02d}-".ljust(45, "x") for k in range(CAPS_LABELS)]
            jobs.append(
                {"id": i, "run_id": i, "name": "j", "status": "queued", "labels": labels,
                 "url": f"{self.url}/caps/api/v1/repos/evil/app/actions/jobs/{i}"}
            )  # fmt: skip
        return json.dumps({"jobs": jobs, "total_count": CAPS_TOTAL}).encode()

    def _memo(self, key: tuple[object, str], build: Callable[[], bytes]) -> bytes:
        """The same answer's bytes built once, not once per request: 48 groups list the
        same pages (the label groups and every URL of ``urls``), and on a 2-core machine
        building them again took CPU from the operator, the one measured. What the operator
        is sent is unchanged; pages of an older generation are dropped."""
        body = self._pages.get(key)
        if body is None:
            if len(self._pages) >= PAGES_KEPT:
                self._pages.clear()
            body = self._pages[key] = build()
        return body

    def _label_jobs(self, query: dict[str, list[str]], generation: int) -> dict[str, Any]:
        """One page of the queue: every job a label of its own, all new each LABEL_EVERY."""
        if query.get("status") != ["queued"]:
            return {"jobs": [], "total_count": 0}
        page, limit = int(query.get("page", ["1"])[0]), int(query.get("limit", ["50"])[0])
        jobs = []
        for i in range((page - 1) * limit, min(page * limit, LABEL_JOBS)):
            job_id = generation * LABEL_JOBS + i + 1
            jobs.append(
                {"id": job_id, "run_id": job_id, "name": "j", "status": "queued",
                 "labels": [f"lbl-{generation}-{i}"], "created_at": "2026-01-01T00:00:00Z",
                 "url": f"{self.url}/labels/api/v1/repos/evil/app/actions/jobs/{job_id}"}
            )  # fmt: skip
        return {"jobs": jobs, "total_count": LABEL_JOBS}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        forge = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._serve()

            def do_POST(self) -> None:
                self._serve()

            def do_PATCH(self) -> None:
                self._serve()

            def do_DELETE(self) -> None:
                self._serve()

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                mode, _, rest = self.path.lstrip("/").partition("/")
                forge.requests[mode] += 1
                forge.last[mode] = time.time()
                # labels7: one of many Gitea URLs (issue 45) served like labels
                mode = mode.rstrip("0123456789")
                with contextlib.suppress(OSError):
                    if mode == "huge" and "/actions/" in rest:
                        self._huge()
                        return
                    where, _, query = rest.partition("?")
                    answer = forge.answer(mode, "/" + where, query)
                    if answer is None:
                        forge.stop_event.wait()
                        return
                    status, body = answer
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            def _huge(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(HUGE_BYTES))
                self.end_headers()
                self.wfile.write(b'{"jobs":[')
                chunk = b" " * (1 << 20)
                for _ in range(HUGE_BYTES >> 20):
                    if forge.stop_event.is_set():
                        return
                    self.wfile.write(chunk)

        return Handler


class WebhookAttack(threading.Thread):
    """Forged deliveries (``forgers`` at a time) and ``silent`` connections that send a
    request's headers and then nothing, each reopened once the receiver closes it."""

    def __init__(
        self, port: int, forgers: int = 4, silent: int = 16, shared_address: bool = False
    ) -> None:
        super().__init__(daemon=True)
        self.port, self.forgers, self.silent = port, forgers, silent
        # shared_address: the attackers reach the receiver from Gitea's own address (one
        # ingress or proxy in front of it for everyone, or the same node's SNAT).
        self.forger = "127.0.0.1" if shared_address else FORGER
        self.holders = ("127.0.0.1",) if shared_address else HOLDERS
        self.forged: collections.Counter[int | str] = collections.Counter()
        self.held: collections.Counter[str] = collections.Counter()
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join(timeout=30)

    def run(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=60)
        connector = aiohttp.TCPConnector(local_addr=(self.forger, 0))
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            tasks = [asyncio.create_task(self._forge(session, i)) for i in range(self.forgers)]
            tasks += [
                asyncio.create_task(self._hold(self.holders[i % len(self.holders)]))
                for i in range(self.silent)
            ]
            await asyncio.to_thread(self._halt.wait)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _forge(self, session: aiohttp.ClientSession, i: int) -> None:
        url = f"http://127.0.0.1:{self.port}/hooks/gitea"
        for n in itertools.count(i):
            headers = {
                "X-Gitea-Event": "workflow_job",
                "X-Gitea-Signature": secrets.token_hex(32),
                "X-Gitea-Delivery": str(uuid.uuid4()),
                "Content-Type": "application/json",
            }
            body = FORGED_BODIES[n % len(FORGED_BODIES)]
            try:
                async with session.post(url, data=body, headers=headers) as resp:
                    await resp.read()
                    self.forged[resp.status] += 1
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.forged[type(exc).__name__] += 1
                await asyncio.sleep(0.1)

    async def _hold(self, address: str) -> None:
        head = (
            "POST /hooks/gitea HTTP/1.1\r\nHost: operator\r\nContent-Type: application/json\r\n"
            "X-Gitea-Event: workflow_job\r\nX-Gitea-Signature: " + "0" * 64 + "\r\n"
            "Content-Length: 65536\r\n\r\n"
        ).encode()
        while True:
            writer = None
            try:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", self.port, local_addr=(address, 0)
                )
                writer.write(head)
                await writer.drain()
                line = await reader.readline()  # the receiver gives up on the body
                self.held[line.split(b" ")[1].decode() if b" " in line else "closed"] += 1
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.held[type(exc).__name__] += 1
                await asyncio.sleep(0.1)
            finally:
                if writer is not None:
                    writer.close()


def main(argv: list[str] | None = None) -> int:
    """Run a hostile tool in a process of its own, so its work never competes with the
    benchmark's measuring threads for one interpreter: ``--forge`` prints its URL, then
    serves; ``--webhook PORT`` attacks. Both print their counts (JSON) on SIGTERM."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--forge", action="store_true")
    parser.add_argument("--webhook", type=int, metavar="PORT")
    parser.add_argument("--shared-address", action="store_true")
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    if args.forge:
        forge = HostileForge()
        forge.start()
        print(forge.url, flush=True)
        while not stop.wait(0.5):
            pass
        forge.stop()
        print(json.dumps({"requests": dict(forge.requests), "last": forge.last}), flush=True)
        return 0
    attack = WebhookAttack(args.webhook, shared_address=args.shared_address)
    attack.start()
    while not stop.wait(0.5):
        pass
    attack.stop()
    print(json.dumps({"forged": dict(attack.forged), "held": dict(attack.held)}), flush=True)
    return 0


class Remote:
    """A hostile tool (:func:`main`) in its own process, as the benchmark drives it."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.benchmarks.hostile_servers", *args],
            stdout=subprocess.PIPE,
            text=True,
        )

    def line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def finish(self) -> dict[str, Any]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return {}
        lines = out.strip().splitlines()
        return dict(json.loads(lines[-1])) if lines else {}


if __name__ == "__main__":
    raise SystemExit(main())
