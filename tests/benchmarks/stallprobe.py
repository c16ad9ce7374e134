"""The event loop's longest single stalls, and what the loop thread was doing during them.

A CPU profile (cpuprobe.py) says where the time goes in all; the loop lag's p99 and max are
set by the longest single callbacks instead, and those may be rare. This probe times every
``asyncio`` handle; a watchdog thread wakes every ``STEP`` seconds and, while one handle has
held the loop longer than ``STALL`` seconds, takes the loop thread's Python stack
(``sys._current_frames``). When the handle ends, the stall is kept with its samples and the
time the garbage collector took inside it (``gc.callbacks``). The dump aggregates by
function the stall time under it (each sample weighted by the time since the previous one:
a C call that holds the GIL, such as ``json.loads``, delays the next sample, so its time
goes to its Python caller) and lists the longest stalls with their callback and leaf frames.

A stall made of many short callbacks run in one loop iteration (or of time between them) is
no single long callback: the probe also times each iteration's busy part (from the
selector's answer to the next select) and lists the longest, with their callbacks.

Opt-in, with ``cpuprobe.py`` (``--cpuprobe DIR`` of the benchmarks): the dump goes into the
same ``cpu-N.txt``. Measuring tools only: the operator never imports this.
"""

from __future__ import annotations

import collections
import gc
import heapq
import os
import selectors
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

# Seconds; GRO_STALL_MS lowers it to find the shorter stalls a runner create's answer waits for.
STALL = float(os.environ.get("GRO_STALL_MS", "50")) / 1000
STEP = 0.005
DEPTH = 40
OURS = "gitea_runner_operator/"


@dataclass
class Stall:
    wall: float
    cpu: float
    others: float  # the process's other threads' CPU meanwhile (the GIL, if theirs)
    name: str
    gc_seconds: dict[int, float]
    samples: list[tuple[float, tuple[str, ...]]]  # (weight s, stack leaf first)

    def __lt__(self, other: Stall) -> bool:
        return self.wall < other.wall


@dataclass
class StallProbe:
    """Fed by the handle timer (``begin``/``end`` around each handle, on the loop thread)."""

    running: bool = False
    keep: int = 25
    loop_thread: int = field(default_factory=threading.get_ident)
    longest: list[Stall] = field(default_factory=list)  # a min-heap
    under: collections.Counter[str] = field(default_factory=collections.Counter)
    own: collections.Counter[str] = field(default_factory=collections.Counter)
    by_callback: collections.Counter[str] = field(default_factory=collections.Counter)
    in_gc: float = 0.0  # stall seconds inside garbage collections
    buckets: collections.Counter[str] = field(default_factory=collections.Counter)
    _started: float = 0.0
    _process: float = 0.0
    _gc: dict[int, float] = field(default_factory=dict)
    _gc_at: float = 0.0
    _samples: list[tuple[float, tuple[str, ...]]] = field(default_factory=list)
    _last_sample: float = 0.0
    # Loop iterations: (busy s, callbacks run, their wall s, the longest three (wall, name)).
    iterations: list[tuple[float, int, float, list[tuple[float, str]]]] = field(
        default_factory=list
    )
    _iteration_began: float = 0.0
    _name_of: Callable[[object], str] = repr
    _ran: list[tuple[float, object]] = field(default_factory=list)

    def start(self, name_of: Callable[[object], str] = repr) -> None:
        self._name_of = name_of
        gc.callbacks.append(self._collected)
        threading.Thread(target=self._watch, name="stallprobe", daemon=True).start()
        select = selectors.DefaultSelector.select
        probe = self

        def timed_select(selector: selectors.BaseSelector, timeout: float | None = None) -> Any:
            probe.iteration_ended()
            try:
                return select(selector, timeout)  # type: ignore[arg-type]
            finally:
                probe._iteration_began = time.perf_counter()

        selectors.DefaultSelector.select = timed_select  # type: ignore[method-assign]

    def ran(self, handle: object, wall: float) -> None:
        if self.running and self._iteration_began:
            self._ran.append((wall, handle))

    def iteration_ended(self) -> None:
        began, ran, self._ran = self._iteration_began, self._ran, []
        if not self.running or not began:
            return
        busy = time.perf_counter() - began
        if busy < STALL:
            return
        longest = [(wall, self._name_of(h)) for wall, h in heapq.nlargest(3, ran, key=_first)]
        entry = (busy, len(ran), sum(wall for wall, _ in ran), longest)
        if len(self.iterations) < self.keep:
            heapq.heappush(self.iterations, entry)
        elif busy > self.iterations[0][0]:
            heapq.heapreplace(self.iterations, entry)

    def clear(self) -> None:
        self.longest.clear()
        self.under.clear()
        self.own.clear()
        self.by_callback.clear()
        self.buckets.clear()
        self.iterations.clear()
        self.in_gc = 0.0

    def begin(self) -> None:
        self._gc = {}
        self._samples = []
        self._process = time.process_time()
        self._last_sample = self._started = time.perf_counter()

    def end(self, name: str, wall: float, cpu: float) -> None:
        self._started = 0.0
        if not self.running or wall < STALL:
            return
        others = max(0.0, time.process_time() - self._process - cpu)
        stall = Stall(wall, cpu, others, name, self._gc, self._samples)
        self.buckets[_bucket(wall)] += 1
        self.by_callback[name] += wall
        self.in_gc += sum(self._gc.values())
        for weight, stack in stall.samples:
            if stack:
                self.own[stack[0]] += weight
            for frame in set(stack):
                self.under[frame] += weight
        if len(self.longest) < self.keep:
            heapq.heappush(self.longest, stall)
        elif wall > self.longest[0].wall:
            heapq.heapreplace(self.longest, stall)

    def _collected(self, phase: str, info: dict[str, int]) -> None:
        if not self._started:
            return
        if phase == "start":
            self._gc_at = time.perf_counter()
        elif self._gc_at:
            generation = info["generation"]
            took = time.perf_counter() - self._gc_at
            self._gc[generation] = self._gc.get(generation, 0.0) + took
            self._gc_at = 0.0

    def _watch(self) -> None:
        while True:
            time.sleep(STEP)
            started = self._started
            now = time.perf_counter()
            if not self.running or not started or now - started < STALL:
                continue
            frame = sys._current_frames().get(self.loop_thread)
            if frame is None or self._started != started:
                continue
            weight, self._last_sample = now - max(self._last_sample, started + STALL), now
            self._samples.append((weight, _stack(frame)))

    def lines(self) -> list[str]:
        total = sum(self.by_callback.values())
        out = [f"loop stalls over {STALL * 1000:.0f} ms (watchdog every {STEP * 1000:.0f} ms):"]
        out += [f"  {name}: {n}" for name, n in sorted(self.buckets.items())]
        out += [f"  in all {total:.2f} s, of which in garbage collections {self.in_gc:.2f} s"]
        out += ["", "stall time by callback (s):"]
        out += [f"{s:8.3f}  {name}" for name, s in self.by_callback.most_common(15)]
        out += ["", "stall time sampled under (s, past the first 50 ms of each):"]
        out += [f"{s:8.3f}  {name}" for name, s in self.under.most_common(40)]
        out += ["", "stall time sampled in (leaf, s):"]
        out += [f"{s:8.3f}  {name}" for name, s in self.own.most_common(20)]
        out += ["", "longest stalls (wall ms, CPU ms, other threads' CPU ms, gc ms, callback):"]
        for stall in sorted(self.longest, reverse=True):
            gcs = sorted(stall.gc_seconds.items())
            collected = " ".join(f"g{g}={1000 * s:.0f}" for g, s in gcs)
            out.append(
                f"{1000 * stall.wall:8.1f} {1000 * stall.cpu:8.1f} {1000 * stall.others:8.1f}"
                f"  [{collected}]  {stall.name}"
            )
            frames: collections.Counter[str] = collections.Counter()
            for weight, stack in stall.samples:
                ours = next((f for f in stack if OURS in f), "")
                frames[f"{stack[0]} <- {ours}" if stack else "?"] += weight
            out += [f"           {1000 * s:6.0f} ms  {f}" for f, s in frames.most_common(4)]
        out += ["", "longest loop iterations over 50 ms (busy ms, callbacks, ms in them; longest):"]
        for busy, count, in_them, longest in sorted(self.iterations, reverse=True):
            named = ", ".join(f"{1000 * wall:.0f} ms {name}" for wall, name in longest)
            out.append(f"{1000 * busy:8.1f} {count:5d} {1000 * in_them:8.1f}  {named}")
        return out


def _first(item: tuple[float, object]) -> float:
    return item[0]


def _bucket(wall: float) -> str:
    for bound in (0.1, 0.25, 0.5, 1.0):
        if wall <= bound:
            return f"<= {bound * 1000:4.0f} ms"
    return ">  1000 ms"


def _stack(frame: FrameType | None) -> tuple[str, ...]:
    names: list[str] = []
    while frame is not None and len(names) < DEPTH:
        code = frame.f_code
        names.append(f"{_short(code.co_filename)}:{code.co_name}")
        frame = frame.f_back
    return tuple(names)


def _short(filename: str) -> str:
    if OURS in filename:
        return OURS + filename.split(OURS, 1)[1]
    return filename.rsplit("/", 2)[-1]
