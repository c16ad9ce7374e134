"""The one operator launcher: ``python -m gitea_runner_operator`` as a user starts it, with a
ServiceAccount's kubeconfig, loopback health and webhook ports, its log in a file. The
integration fixture, the benchmarks and the sandbox demo all start the operator through it,
so a new flag or a changed readiness rule is written once."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.testbed.sandbox import _die_with_parent, free_port

OPERATOR_NS = "gitea-runner-operator"
OPERATOR_SA = "gitea-runner-operator"


@dataclass
class OperatorProcess:
    proc: subprocess.Popen[bytes]
    log_path: Path | None
    health_port: int
    webhook_port: int = 0
    args: list[str] = field(default_factory=list)
    killed: bool = False

    def kill(self) -> None:
        """SIGKILL, as the OOM killer or a node failure would: no clean-up runs."""
        self.killed = True
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    def log_events(self) -> list[dict[str, Any]]:
        events = []
        for line in self.log().splitlines():
            with contextlib.suppress(ValueError):
                events.append(json.loads(line))
        return events

    def log_count(self, text: str) -> int:
        """Lines of the operator's log that contain ``text``."""
        return sum(1 for line in self.log().splitlines() if text in line)

    def readyz(self) -> int:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.health_port}/readyz", timeout=2
            ) as resp:
                return int(resp.status)
        except Exception:
            return 0

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """/metrics parsed: (sample name, sorted labels) -> value."""
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.health_port}/metrics", timeout=10
        ) as resp:
            text = resp.read().decode()
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def snapshot(self) -> None:
        """Ask an operator started with ``memprobe`` for a tracemalloc snapshot."""
        self.proc.send_signal(signal.SIGUSR2)

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def wait_ready(self, timeout: float = 60) -> bool:
        """Until /readyz answers 200 (True) or the process exits or time is up (False)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                return False
            if self.readyz() == 200:
                return True
            time.sleep(0.5)
        return False

    def stop(self, timeout: float = 40) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)


def launch(
    kubeconfig: Path,
    namespaces: Iterable[str],
    *,
    log_path: Path | None,
    extra: Iterable[str] = (),
    leader_election_namespace: str | None = OPERATOR_NS,
    log_format: str = "json",
    env: dict[str, str] | None = None,
    memprobe: Path | None = None,
    cpuprobe: Path | None = None,
    cgroup: Path | None = None,
    cpus: set[int] | None = None,
) -> OperatorProcess:
    """Start the operator; ``leader_election_namespace=None`` runs it without leader
    election, ``log_path=None`` leaves its log on this process's terminal. The caller's
    KUBECONFIG is dropped so that only ``kubeconfig`` (the ServiceAccount's) is used. With
    ``memprobe`` (a directory) it runs under tracemalloc (tests/benchmarks/memprobe.py), its
    snapshots written there on ``OperatorProcess.snapshot()``; with ``cpuprobe`` under a
    sampling CPU profiler (tests/benchmarks/cpuprobe.py), started and dumped the same way.
    With ``cgroup`` (a cgroup directory) it starts in that cgroup, so all it allocates is
    charged there. With ``cpus``, it runs on those CPUs only (every thread it starts too)."""
    health, hook = free_port(), free_port()
    election = (
        ["--leader-election-namespace", leader_election_namespace]
        if leader_election_namespace
        else ["--no-leader-elect"]
    )
    args = [
        sys.executable, "-m",
        *(["tests.benchmarks.memprobe", str(memprobe)] if memprobe else
          ["tests.benchmarks.cpuprobe", str(cpuprobe)] if cpuprobe else
          ["gitea_runner_operator"]),
        "--kubeconfig", str(kubeconfig), *election,
        "--health-host", "127.0.0.1", "--health-port", str(health),
        "--webhook-host", "127.0.0.1", "--webhook-port", str(hook),
        "--log-format", log_format,
        *[a for ns in namespaces for a in ("--namespace", ns)],
        *extra,
    ]  # fmt: skip
    environ = {**{k: v for k, v in os.environ.items() if k != "KUBECONFIG"}, **(env or {})}
    out: Any = None
    if log_path is not None:
        out = log_path.open("wb")
    try:
        # Dies with the process that started it: a benchmark ended by SIGTERM (`timeout`)
        # stops its sandbox from a signal handler, which no `finally` here outlives. Only
        # from the main thread: the kernel ties the signal to the starting thread.
        main = threading.current_thread() is threading.main_thread()

        def before_exec() -> None:
            if cgroup is not None:
                (cgroup / "cgroup.procs").write_text(str(os.getpid()))
            if cpus:
                os.sched_setaffinity(0, cpus)
            if main:
                _die_with_parent()

        proc = subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=environ,
            preexec_fn=before_exec if main or cgroup is not None or cpus else None,
        )
    finally:
        if out is not None:
            out.close()  # the child holds its own descriptor
    return OperatorProcess(proc, log_path, health, hook, args)
