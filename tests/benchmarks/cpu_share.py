"""Where a benchmark machine's CPU went, per phase: each process the benchmark started (the
operator, fake Gitea servers, attackers, the benchmark itself), the testbed's (API server,
etcd, controller-manager, scheduler, kwok, found by name), and the rest of the machine
(anything else running: on a shared machine, others' work).

On a 2-core machine the harness's own processes take CPU the operator would otherwise get:
this says how much, so a figure can be read as the operator's or the harness's.
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
        self._last: dict[str, float] = {}  # a process that ended keeps its last figure
        self._marks: list[tuple[str, float, float, dict[str, float]]] = []

    def track(self, name: str, pid: int) -> None:
        self._pids[name] = pid

    def mark(self, phase: str, at: float) -> None:
        """``at``: the benchmark's clock (seconds), to turn CPU seconds into cores."""
        for name, pid in self._pids.items():
            seconds = process_seconds(pid)
            if seconds is not None:
                self._last[name] = seconds
        self._last["testbed"] = named_seconds(TESTBED)
        self._marks.append((phase, at, machine_seconds(), dict(self._last)))

    def lines(self) -> list[str]:
        """Cores used per phase, by process and the rest of the machine."""
        out = []
        for (phase, t0, m0, p0), (_, t1, m1, p1) in itertools.pairwise(self._marks):
            span = max(1e-9, t1 - t0)
            used = {name: (p1.get(name, 0.0) - p0.get(name, 0.0)) / span for name in p1}
            rest = (m1 - m0) / span - sum(used.values())
            parts = ", ".join(f"{name} {cores:.2f}" for name, cores in used.items())
            out.append(f"cores used, {phase}: {parts}, rest of the machine {rest:.2f}")
        return out
