"""The healthy tenants' Gitea for tests/benchmarks/hostile.py, in a process of its own.

A real platform's Gitea is its own server: it queues a job, then sends the hook's delivery
for it, and neither waits for the benchmark that watches the operator. Until issue 45's
pickup work the fake Gitea (fake_gitea.SimulatedGitea) was threads of the benchmark's own
process, and so were the senders of the healthy deliveries and of the wrong-secret hook:
they shared one interpreter (one GIL) with the benchmark's measuring threads (the Job
watches, the /healthz probe, the Lease and RSS sampler), so the benchmark's own work was
counted in "Gitea's answer" and in "delivery accepted". Here the fake Gitea runs alone in a
child process and does what Gitea does for a job: it queues it, stamps when (``time.monotonic``,
one clock for every process of the machine), and sends its signed delivery from its own
threads, from Gitea's address (127.0.0.1). It also sends the wrong-secret hook (a tenant's
hook on its own repository, from the same address, as Gitea would). The hostile tenants that
name this Gitea (1 MiB Secrets, CA bundles, the cache group) still poll it, as on a platform
with one Gitea for everyone; it answers them with its own interpreter.

The benchmark drives it over the child's stdin and stdout (:class:`GiteaProcess`), one JSON
line a command; ``finish`` returns what it recorded.
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gitea_runner_operator.webhook.signature import sign
from tests.support.fake_gitea import SimulatedGitea
from tests.support.webhook import post_delivery


class Sender:
    """The child's side: the fake Gitea, the jobs queued for the healthy groups and their
    deliveries, and the wrong-secret hook."""

    def __init__(self) -> None:
        self.fake = SimulatedGitea()
        self.queued: dict[str, list[tuple[float, str]]] = collections.defaultdict(list)
        self.answers: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )
        # Per genuine delivery: (phase, queued at, answered at), time.monotonic().
        self.round_trips: list[tuple[str, float, float]] = []
        self.wrong: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=8)
        self._stop = threading.Event()

    def job(self, group: str, secret: str, port: int, phase: str, owner: str) -> None:
        """Queue a job with label ``group`` in ``{owner}/app``, then send its delivery."""
        self.fake.queue(owner, "app", (group,))
        at = time.monotonic()
        with self._lock:
            self.queued[group].append((at, phase))
        self._pool.submit(self._deliver, group, secret, port, phase, at, owner)

    def _deliver(
        self, group: str, secret: str, port: int, phase: str, at: float, owner: str
    ) -> None:
        body = self._body(f"{owner}/app", group, "bench")
        status = post_delivery(port, body, sign(secret.encode(), body))
        with self._lock:
            self.answers[phase][status] += 1
            self.round_trips.append((phase, at, time.monotonic()))

    def wrong_hooks(self, port: int, every: float) -> None:
        """A tenant's hook with a wrong secret on its own repository, until :meth:`stop`."""
        threading.Thread(target=self._wrong_hooks, args=(port, every), daemon=True).start()

    def _wrong_hooks(self, port: int, every: float) -> None:
        body = self._body("evil/app", "e", "evil")
        while not self._stop.is_set():
            status = post_delivery(port, body, sign(b"not-the-secret", body))
            with self._lock:
                self.wrong[status] += 1
            self._stop.wait(every)

    def _body(self, repository: str, label: str, sender: str) -> bytes:
        return json.dumps(
            {
                "action": "queued",
                "repository": {
                    "full_name": repository,
                    "html_url": f"{self.fake.url}/{repository}",
                },
                "workflow_job": {"labels": [label], "name": "j"},
                "sender": {"login": sender},
            }
        ).encode()

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._pool.shutdown(wait=True)
        self.fake.stop()
        with self._lock:
            return {
                "queued": self.queued,
                "answers": self.answers,
                "round_trips": self.round_trips,
                "wrong": self.wrong,
                "requests": self.fake.requests,
            }


def serve() -> int:
    """The child: its URL on the first line, then one line per command answered."""
    sender = Sender()
    sender.fake.start(None)
    print(json.dumps({"url": sender.fake.url}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        op = command.pop("op")
        if op == "job":
            sender.job(**command)  # not answered: the benchmark keeps its pace
        elif op == "queue":
            ids = sender.fake.queue(command["owner"], command["repo"], tuple(command["labels"]))
            print(json.dumps({"ids": ids}), flush=True)
        elif op == "wronghook":
            sender.wrong_hooks(command["port"], command["every"])
        elif op == "finish":
            break
    print(json.dumps(sender.stop()), flush=True)
    return 0


class GiteaProcess:
    """The benchmark's side: the child started, and its commands."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.benchmarks.hostile_gitea"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.url = str(self._read()["url"])
        self._lock = threading.Lock()
        self._record: dict[str, Any] = {}

    def _send(self, **command: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the fake Gitea's process ended")
        return dict(json.loads(line))

    def job(self, group: str, secret: str, port: int, phase: str, owner: str) -> None:
        with self._lock:
            self._send(op="job", group=group, secret=secret, port=port, phase=phase, owner=owner)

    def queue(self, owner: str, repo: str, labels: tuple[str, ...], n: int = 1) -> list[int]:
        """Queue ``n`` jobs (answered: they are in the queue when this returns)."""
        ids: list[int] = []
        with self._lock:
            for _ in range(n):
                self._send(op="queue", owner=owner, repo=repo, labels=list(labels))
                ids += self._read()["ids"]
        return ids

    def wrong_hooks(self, port: int, every: float) -> None:
        with self._lock:
            self._send(op="wronghook", port=port, every=every)

    def finish(self) -> dict[str, Any]:
        """Stop it; what it recorded (see :meth:`Sender.stop`), empty if it died. Once
        stopped, the same record again."""
        if self.proc.poll() is not None:
            return self._record
        try:
            with self._lock:
                self._send(op="finish")
                self._record = self._read()
            self.proc.wait(timeout=60)
        except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        return self._record


if __name__ == "__main__":
    raise SystemExit(serve())
