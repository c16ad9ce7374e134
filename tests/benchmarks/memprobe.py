"""The operator under tracemalloc, for the memory benchmarks: where does the memory go?

    python -m tests.benchmarks.memprobe DIR [operator arguments ...]
    python -m tests.benchmarks.memprobe --report DIR/snap-1.pickle [DIR/snap-2.pickle]

The first form runs ``gitea_runner_operator`` with tracemalloc on (one frame per allocation,
so the overhead stays small); every SIGUSR2 writes ``DIR/snap-N.pickle`` (a tracemalloc
snapshot) and ``DIR/snap-N.txt`` (live objects by type, from the garbage collector's view).
The benchmark sends the signal (``OperatorProcess.snapshot``). The second form prints the
allocations by module, and with two snapshots the growth between them by line: the leak
behind a slope. Measuring tools only: the operator itself never imports this.
"""

from __future__ import annotations

import collections
import gc
import signal
import sys
import tracemalloc
from pathlib import Path
from types import FrameType

_count = 0


def _dump(directory: Path) -> None:
    global _count
    _count += 1
    snap = tracemalloc.take_snapshot()
    snap.dump(str(directory / f"snap-{_count}.pickle"))
    types = collections.Counter(type(o).__name__ for o in gc.get_objects())
    lines = [f"{n:>9} {name}" for name, n in types.most_common(40)]
    (directory / f"snap-{_count}.txt").write_text("\n".join(lines) + "\n")


def run(directory: Path, argv: list[str]) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    tracemalloc.start(1)

    def handler(_sig: int, _frame: FrameType | None) -> None:
        _dump(directory)

    signal.signal(signal.SIGUSR2, handler)
    from gitea_runner_operator.cli import main

    return int(main(argv) or 0)


def _module(filename: str) -> str:
    for marker in ("site-packages/", "dist-packages/", "/lib/python3"):
        if marker in filename:
            rest = filename.split(marker, 1)[1].lstrip("/")
            parts = rest.split("/")
            return parts[0] if marker != "/lib/python3" else "stdlib:" + "/".join(parts[1:2])
    if "gitea_runner_operator/" in filename:
        return "gro:" + filename.split("gitea_runner_operator/", 1)[1]
    return filename


def report(paths: list[Path], top: int = 25) -> None:
    snaps = [
        tracemalloc.Snapshot.load(str(p)).filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)]
        )
        for p in paths
    ]
    last = snaps[-1]
    by_module: collections.Counter[str] = collections.Counter()
    for stat in last.statistics("filename"):
        by_module[_module(stat.traceback[0].filename)] += stat.size
    total = sum(by_module.values())
    print(f"traced: {total / 2**20:.1f} MiB in {paths[-1].name}; by module:")
    for name, size in by_module.most_common(top):
        print(f"  {size / 2**20:8.2f} MiB  {name}")
    print("by line:")
    for stat in last.statistics("lineno")[:top]:
        frame = stat.traceback[0]
        print(
            f"  {stat.size / 2**20:8.2f} MiB {stat.count:>8} blocks  "
            f"{_module(frame.filename)}:{frame.lineno}"
        )
    if len(snaps) > 1:
        print(f"growth {paths[0].name} -> {paths[-1].name}, by line:")
        for diff in last.compare_to(snaps[0], "lineno")[:top]:
            frame = diff.traceback[0]
            print(
                f"  {diff.size_diff / 2**20:+8.2f} MiB {diff.count_diff:+8} blocks  "
                f"{_module(frame.filename)}:{frame.lineno}"
            )


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--report":
        report([Path(p) for p in argv[1:]])
        return 0
    return run(Path(argv[0]), argv[1:])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
