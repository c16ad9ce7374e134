"""The operator under a sampling CPU profiler, for the scale benchmarks: where does its CPU go?

    python -m tests.benchmarks.cpuprobe DIR [operator arguments ...]

Runs ``gitea_runner_operator`` with a ``SIGPROF`` timer (every 5 ms of the process's CPU
time) that records the main thread's Python stack. The first SIGUSR2 starts the sampling;
each later one writes what was sampled since the previous one to ``DIR/cpu-N.txt`` (the
functions with the most samples, by their own time and by the time under them) and starts
again. The benchmark sends the signals (``OperatorProcess.snapshot``) around the phase it
measures. Sampling (not cProfile's tracing) keeps the operator's speed as measured; CPU
spent outside the main thread is counted where the main thread happened to be.

The same file also names the event loop's callbacks: every ``asyncio`` handle run while
sampling is timed (wall clock and the thread's CPU), so the dump lists the callbacks that
took the most CPU in all and the longest single ones, and the loop's stalls over 50 ms with
the loop thread's stack during each (stallprobe.py). A long wall time with little CPU is a
callback the kernel did not run (the machine's load), not work of ours. Measuring tools
only: the operator itself never imports this.
"""

from __future__ import annotations

import asyncio.events
import collections
import gc
import heapq
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from tests.benchmarks.stallprobe import STALL, StallProbe

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
        self.callbacks = CallbackTimes()
        self.stalls = StallProbe()

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
        self.callbacks.clear()
        self.stalls.clear()
        self.running = True
        self.callbacks.running = True
        self.stalls.running = True

    def dump(self) -> None:
        self.dumps += 1
        total = max(self.samples, 1)
        lines = [f"{self.samples} samples of {INTERVAL * 1000:.0f} ms CPU", "", "own time:"]
        lines += [f"{100 * n / total:6.1f}% {name}" for name, n in self.own.most_common(50)]
        lines += ["", "time under (cumulative):"]
        lines += [f"{100 * n / total:6.1f}% {name}" for name, n in self.under.most_common(80)]
        lines += ["", *self.callbacks.lines()]
        lines += ["", *self.stalls.lines()]
        (self.directory / f"cpu-{self.dumps}.txt").write_text("\n".join(lines) + "\n")


class CallbackTimes:
    """Times each run of an event-loop handle: per callback name the runs and CPU in all, and
    the longest single runs by wall clock (with their CPU beside)."""

    KEEP = 25

    def __init__(self) -> None:
        self.running = False
        self.cpu: collections.Counter[str] = collections.Counter()
        self.runs: collections.Counter[str] = collections.Counter()
        self.longest: list[tuple[float, float, str]] = []  # a min-heap of (wall, cpu, name)
        # Garbage collections run inside whichever callback allocates: per generation the
        # runs, the seconds in all and the longest one.
        self.gc: dict[int, list[float]] = {}
        self._gc_started = 0.0
        gc.callbacks.append(self._collected)

    def _collected(self, phase: str, info: dict[str, int]) -> None:
        if not self.running:
            return
        if phase == "start":
            self._gc_started = time.perf_counter()
            return
        if not self._gc_started:
            return  # started before the sampling did
        took, self._gc_started = time.perf_counter() - self._gc_started, 0.0
        runs = self.gc.setdefault(info["generation"], [0.0, 0.0, 0.0])
        runs[0] += 1
        runs[1] += took
        runs[2] = max(runs[2], took)

    def clear(self) -> None:
        self.cpu.clear()
        self.runs.clear()
        self.longest.clear()
        self.gc.clear()

    def record(self, handle: asyncio.events.Handle, wall: float, cpu: float) -> None:
        name = callback_name(handle)
        self.cpu[name] += cpu
        self.runs[name] += 1
        if len(self.longest) < self.KEEP:
            heapq.heappush(self.longest, (wall, cpu, name))
        elif wall > self.longest[0][0]:
            heapq.heapreplace(self.longest, (wall, cpu, name))

    def lines(self) -> list[str]:
        total = sum(self.cpu.values())
        out = [f"event-loop callbacks: {sum(self.runs.values())} runs, {total:.2f} s CPU"]
        out += ["", "callbacks by CPU in all (s, runs, mean ms):"]
        out += [
            f"{cpu:8.3f} {self.runs[name]:7d} {1000 * cpu / self.runs[name]:8.2f}  {name}"
            for name, cpu in self.cpu.most_common(30)
        ]
        out += ["", "longest single callbacks (wall ms, CPU ms):"]
        out += [
            f"{1000 * wall:8.1f} {1000 * cpu:8.1f}  {name}"
            for wall, cpu, name in sorted(self.longest, reverse=True)
        ]
        out += ["", "garbage collections (generation: runs, seconds in all, longest ms):"]
        out += [
            f"{gen}: {int(runs)} {took:.3f} {1000 * longest:.1f}"
            for gen, (runs, took, longest) in sorted(self.gc.items())
        ]
        return out


def callback_name(handle: asyncio.events.Handle) -> str:
    """A task's coroutine, a transport's protocol, or the callable's own name."""
    callback = handle._callback
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        coro = owner.get_coro()
        return f"task {getattr(coro, '__qualname__', type(coro).__name__)}"
    name = getattr(callback, "__qualname__", type(callback).__name__)
    protocol = getattr(owner, "_protocol", None)
    if protocol is not None:
        return f"{name} ({type(protocol).__qualname__})"
    return str(name)


def _timed_handles(times: CallbackTimes, stalls: StallProbe) -> None:
    run = asyncio.events.Handle._run

    def timed(handle: asyncio.events.Handle) -> None:
        if not times.running:
            run(handle)
            return
        stalls.begin()
        wall, cpu = time.perf_counter(), time.thread_time()
        run(handle)
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        times.record(handle, wall, cpu)
        stalls.ran(handle, wall)
        stalls.end(callback_name(handle) if wall >= STALL else "", wall, cpu)

    asyncio.events.Handle._run = timed  # type: ignore[method-assign]


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
    _timed_handles(sampler.callbacks, sampler.stalls)
    sampler.stalls.start(callback_name)  # type: ignore[arg-type]
    from gitea_runner_operator.cli import main

    return int(main(argv) or 0)


if __name__ == "__main__":
    raise SystemExit(run(Path(sys.argv[1]), sys.argv[2:]))
