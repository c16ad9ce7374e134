"""Where a benchmark machine's CPU went, per phase: each process the benchmark started (the
operator, fake Gitea servers, attackers, the benchmark itself), the testbed's (API server,
etcd, controller-manager, scheduler, kwok, found by name), and the rest of the machine
(anything else running: on a shared machine, others' work).

On a 2-core machine the harness's own processes take CPU the operator would otherwise get:
this says how much, so a figure can be read as the operator's or the harness's. A process
tracked with ``threads=True`` is also split by its threads' kernel names (the operator names
its threads: kit/thread_names.py): which of its threads used its cores.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def process_seconds(pid: int) -> float | None:
    """User and system CPU seconds of ``pid`` (all its threads), None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


def thread_seconds(pid: int) -> dict[str, float]:
    """CPU seconds of ``pid``'s threads by kernel name (threads of one name summed); its main
    thread is ``main``. Threads that ended are not counted: read them while they run."""
    out: dict[str, float] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            name = "main" if task.name == str(pid) else (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / TICK
    return out


# The testbed's processes, by the name the kernel keeps (15 characters at most).
TESTBED = ("kube-apiserver", "etcd", "kube-controller", "kube-scheduler", "kwok")


def named_seconds(names: tuple[str, ...]) -> float:
    """CPU seconds of every process running now whose name is one of ``names``."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() not in names:
                continue
        except OSError:
            continue
        total += process_seconds(int(entry.name)) or 0.0
    return total


def machine_seconds() -> float:
    """CPU seconds every core of the machine spent busy (not idle, not waiting for I/O)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = values
    return (user + nice + system + irq + softirq + steal) / TICK


class CpuShare:
    """:meth:`track` the processes, :meth:`mark` where each phase starts (and the end)."""

    def __init__(self) -> None:
        self._pids: dict[str, int] = {}
        self._split: set[str] = set()  # processes also split by thread
        self._last: dict[str, float] = {}  # a process that ended keeps its last figure
        self._marks: list[tuple[str, float, float, dict[str, float]]] = []
        self._threads: list[dict[tuple[str, str], float]] = []  # per mark

    def track(self, name: str, pid: int, *, threads: bool = False) -> None:
        self._pids[name] = pid
        if threads:
            self._split.add(name)

    def mark(self, phase: str, at: float) -> None:
        """``at``: the benchmark's clock (seconds), to turn CPU seconds into cores."""
        for name, pid in self._pids.items():
            seconds = process_seconds(pid)
            if seconds is not None:
                self._last[name] = seconds
        self._last["testbed"] = named_seconds(TESTBED)
        threads = {
            (name, thread): seconds
            for name in self._split
            for thread, seconds in thread_seconds(self._pids[name]).items()
        }
        self._marks.append((phase, at, machine_seconds(), dict(self._last)))
        self._threads.append(threads)

    def lines(self) -> list[str]:
        """Cores used per phase, by process and the rest of the machine."""
        out = []
        for (phase, t0, m0, p0), (_, t1, m1, p1) in itertools.pairwise(self._marks):
            span = max(1e-9, t1 - t0)
            used = {name: (p1.get(name, 0.0) - p0.get(name, 0.0)) / span for name in p1}
            rest = (m1 - m0) / span - sum(used.values())
            parts = ", ".join(f"{name} {cores:.2f}" for name, cores in used.items())
            out.append(f"cores used, {phase}: {parts}, rest of the machine {rest:.2f}")
        for i, ((phase, t0, _, _), (_, t1, _, _)) in enumerate(itertools.pairwise(self._marks)):
            span = max(1e-9, t1 - t0)
            before, after = self._threads[i], self._threads[i + 1]
            for name in sorted(self._split):
                used = {
                    thread: (seconds - before.get((name, thread), 0.0)) / span
                    for (process, thread), seconds in after.items()
                    if process == name
                }
                parts = ", ".join(
                    f"{thread} {cores:.3f}"
                    for thread, cores in sorted(used.items(), key=lambda kv: -kv[1])
                    if cores >= 0.001
                )
                out.append(f"{name}'s threads, {phase}: {parts}")
        return out
