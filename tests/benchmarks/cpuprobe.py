"""The operator under a sampling CPU profiler, for the scale benchmarks: where does its CPU go?

    python -m tests.benchmarks.cpuprobe DIR [operator arguments ...]

Runs ``gitea_runner_operator`` with a ``SIGPROF`` timer (every 5 ms of the process's CPU
time) that records the main thread's Python stack. The first SIGUSR2 starts the sampling;
each later one writes what was sampled since the previous one to ``DIR/cpu-N.txt`` (the
functions with the most samples, by their own time and by the time under them) and starts
again. The benchmark sends the signals (``OperatorProcess.snapshot``) around the phase it
measures. Sampling (not cProfile's tracing) keeps the operator's speed as measured; CPU
spent outside the main thread is counted where the main thread happened to be. Measuring
tools only: the operator itself never imports this.
"""

from __future__ import annotations

import collections
import signal
import sys
from pathlib import Path
from types import FrameType

INTERVAL = 0.005
DEPTH = 60


class Sampler:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.own: collections.Counter[str] = collections.Counter()
        self.under: collections.Counter[str] = collections.Counter()
        self.samples = 0
        self.dumps = 0
        self.running = False

    def sample(self, _sig: int, frame: FrameType | None) -> None:
        if not self.running or frame is None:
            return
        self.samples += 1
        seen: set[str] = set()
        leaf = True
        depth = 0
        while frame is not None and depth < DEPTH:
            code = frame.f_code
            name = f"{_short(code.co_filename)}:{code.co_name}"
            if leaf:
                self.own[name] += 1
                leaf = False
            if name not in seen:
                seen.add(name)
                self.under[name] += 1
            frame = frame.f_back
            depth += 1

    def toggle(self, _sig: int, _frame: FrameType | None) -> None:
        if self.running:
            self.dump()
        self.own.clear()
        self.under.clear()
        self.samples = 0
        self.running = True

    def dump(self) -> None:
        self.dumps += 1
        total = max(self.samples, 1)
        lines = [f"{self.samples} samples of {INTERVAL * 1000:.0f} ms CPU", "", "own time:"]
        lines += [f"{100 * n / total:6.1f}% {name}" for name, n in self.own.most_common(50)]
        lines += ["", "time under (cumulative):"]
        lines += [f"{100 * n / total:6.1f}% {name}" for name, n in self.under.most_common(80)]
        (self.directory / f"cpu-{self.dumps}.txt").write_text("\n".join(lines) + "\n")


def _short(filename: str) -> str:
    for marker in ("site-packages/", "dist-packages/", "gitea_runner_operator/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename.rsplit("/", 2)[-1] if "/lib/python3" in filename else filename


def run(directory: Path, argv: list[str]) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    sampler = Sampler(directory)
    signal.signal(signal.SIGPROF, sampler.sample)
    signal.signal(signal.SIGUSR2, sampler.toggle)
    signal.setitimer(signal.ITIMER_PROF, INTERVAL, INTERVAL)
    from gitea_runner_operator.cli import main

    return int(main(argv) or 0)


if __name__ == "__main__":
    raise SystemExit(run(Path(sys.argv[1]), sys.argv[2:]))
