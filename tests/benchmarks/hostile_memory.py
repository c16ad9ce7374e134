"""The operator's memory in the hostile benchmark (hostile.py): the container's limit as a
real memory cgroup, and the tenants' budget a chart install of that limit gets."""

from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path


def memory_args(args: argparse.Namespace) -> tuple[str, ...]:
    """With a memory limit, the budget a chart install of that limit gets (40 %)."""
    budget = args.tenant_memory_budget or int(args.memory_limit * 0.4)
    return ("--tenant-memory-budget", str(budget)) if budget else ()


class MemoryCgroup:
    """The operator in a memory cgroup (v1) of ``limit`` MiB, as in a container with
    ``resources.limits.memory``: past it the kernel OOM-kills it (0: no cgroup)."""

    ROOT = Path("/sys/fs/cgroup/memory")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.path = self.ROOT / f"gro-hostile-{os.getpid()}"

    def __enter__(self) -> MemoryCgroup:
        if self.limit:
            self.path.mkdir()
            (self.path / "memory.limit_in_bytes").write_text(str(self.limit * 2**20))
        return self

    def figures(self) -> str:
        if not self.limit:
            return ""
        peak = int((self.path / "memory.max_usage_in_bytes").read_text()) / 2**20
        oom = (self.path / "memory.oom_control").read_text().split()
        kills = oom[oom.index("oom_kill") + 1] if "oom_kill" in oom else "?"
        return (
            f"memory cgroup: limit {self.limit} MiB, peak usage {peak:.0f} MiB (RSS and page "
            f"cache), OOM kills {kills}"
        )

    def __exit__(self, *_exc: object) -> None:
        if not self.limit:
            return
        for pid in (self.path / "cgroup.procs").read_text().split():  # back to the root
            with contextlib.suppress(OSError):
                (self.ROOT / "cgroup.procs").write_text(pid)
        with contextlib.suppress(OSError):
            self.path.rmdir()
