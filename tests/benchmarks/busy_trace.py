"""The busy benchmark's instruments: what the cluster and the fake Gitea show every half
second, each runner's way from "its job is done" to "its replacement took the next job", and
the picture of busy runners over time.

Who owns each step, so that the operator's share is told apart from the simulation's:
- job done -> Pod Succeeded: the fake (its loop notices the job's end, then patches the Pod);
- Pod Succeeded -> runner Job complete: the Job controller (kube-controller-manager);
- Pod Succeeded -> replacement Job created: the operator (a Pod that succeeded frees its
  slot; before, the operator waited for the Job's Complete condition);
- Job created -> its Pod exists: the Job controller;
- Pod exists -> Pod Running: the scheduler and kwok;
- Pod Running -> registered: the fake's registration delay (``--start``) and its loop;
- registered -> job taken: the fake's dispatch (same loop pass).
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.support.fake_gitea import SELECTOR, SimulatedGitea
from tests.testbed.kube import KubeClient

STEP = 0.5


@dataclass
class Sample:
    t: float
    queued: int
    runner_jobs: int  # holding a slot (not complete, no Pod succeeded)
    registered: int
    busy: int


@dataclass
class Tracer:
    """Samples the cluster and the fake every ``STEP`` seconds in a thread of its own."""

    kube: KubeClient
    namespace: str
    fake: SimulatedGitea
    t0: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    job_created: dict[str, float] = field(default_factory=dict)  # first seen
    job_complete: dict[str, float] = field(default_factory=dict)  # first seen complete
    pod_job: dict[str, str] = field(default_factory=dict)
    pod_seen: dict[str, float] = field(default_factory=dict)  # first seen, any phase
    pod_running: dict[str, float] = field(default_factory=dict)
    pod_succeeded: dict[str, float] = field(default_factory=dict)
    pod_gone: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self, t0: float) -> None:
        self.t0 = t0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        base = f"/namespaces/{self.namespace}"
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                jobs = self.kube.get(f"/apis/batch/v1{base}/jobs", labelSelector=SELECTOR)
                pods = self.kube.get(f"/api/v1{base}/pods", labelSelector=SELECTOR)
            except Exception:  # a slow API server: try again
                time.sleep(STEP)
                continue
            now = time.monotonic()
            exited = {
                (p["metadata"].get("labels") or {}).get("job-name")
                for p in pods["items"]
                if (p.get("status") or {}).get("phase") == "Succeeded"
            }
            alive = 0  # holding a slot as the operator counts: not complete, runner not exited
            for job in jobs["items"]:
                name = job["metadata"]["name"]
                self.job_created.setdefault(name, now)
                if _complete(job):
                    self.job_complete.setdefault(name, now)
                elif name not in exited:
                    alive += 1
            present = set()
            for pod in pods["items"]:
                meta, phase = pod["metadata"], (pod.get("status") or {}).get("phase")
                present.add(meta["name"])
                self.pod_job[meta["name"]] = meta.get("labels", {}).get("job-name", "")
                self.pod_seen.setdefault(meta["name"], now)
                if phase == "Running":
                    self.pod_running.setdefault(meta["name"], now)
                elif phase == "Succeeded":
                    self.pod_succeeded.setdefault(meta["name"], now)
            for name in self.pod_job:
                if name not in present:
                    self.pod_gone.setdefault(name, now)
            self.samples.append(
                Sample(
                    now - self.t0,
                    self.fake.count("queued"),
                    alive,
                    len(self.fake.runners),
                    self.fake.busy_runners(),
                )
            )
            time.sleep(max(0.0, STEP - (time.monotonic() - began)))


def _complete(job: dict[str, Any]) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def _stats(values: list[float]) -> str:
    if not values:
        return "n/a"
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return f"median {statistics.median(ordered):5.2f}s  p90 {p90:5.2f}s  max {ordered[-1]:5.2f}s"


def breakdown(tr: Tracer, slots: int) -> dict[str, list[float]]:
    """Each step's durations, per runner. A replacement is paired first-in, first-out with
    the finished runner whose slot it took: the k-th runner Job created after the first
    ``slots`` with the k-th runner Job to complete."""
    fake = tr.fake.trace
    by_job = {job: pod for pod, job in tr.pod_job.items()}
    steps: dict[str, list[float]] = {k: [] for k in STEP_NAMES}

    def add(step: str, a: float | None, b: float | None) -> None:
        if a is not None and b is not None:
            steps[step].append(b - a)

    for job, pod in by_job.items():
        f = fake.get(pod, {})
        add("Job created -> its Pod exists (Job controller)", tr.job_created.get(job),
            tr.pod_seen.get(pod))  # fmt: skip
        add("Pod exists -> Pod Running (scheduler, kwok)", tr.pod_seen.get(pod),
            tr.pod_running.get(pod))  # fmt: skip
        add("Pod Running -> registered (fake: delay + loop)", tr.pod_running.get(pod),
            f.get("registered"))  # fmt: skip
        add("registered -> job taken (fake)", f.get("registered"), f.get("took"))
        add("job done -> Pod Succeeded (fake)", f.get("done"), f.get("succeeded"))
        add("Pod Succeeded -> Job complete (Job controller)", f.get("succeeded"),
            tr.job_complete.get(job))  # fmt: skip
    created = sorted(tr.job_created.values())[slots:]
    exited = sorted(f["succeeded"] for f in fake.values() if "succeeded" in f)
    for done, new in zip(exited, created, strict=False):
        steps["Pod Succeeded -> replacement created (operator)"].append(new - done)
    dones = sorted(f["done"] for f in fake.values() if "done" in f)
    tooks = sorted(f["took"] for f in fake.values() if "took" in f)[slots:]
    for done, took in zip(dones, tooks, strict=False):
        steps["slot idle: job done -> next job taken (all)"].append(took - done)
    return steps


STEP_NAMES = (
    "job done -> Pod Succeeded (fake)",
    "Pod Succeeded -> Job complete (Job controller)",
    "Pod Succeeded -> replacement created (operator)",
    "Job created -> its Pod exists (Job controller)",
    "Pod exists -> Pod Running (scheduler, kwok)",
    "Pod Running -> registered (fake: delay + loop)",
    "registered -> job taken (fake)",
    "slot idle: job done -> next job taken (all)",
)


def lost_slots(tr: Tracer, slots: int) -> dict[str, float]:
    """Where the idle slots went, on average while jobs were queued after the first fill:
    no runner Job holds the slot (the operator's), a runner Job holds it but its runner has
    not registered (the Job controller, scheduler, kwok and the fake's registration), or a
    registered runner has not taken a job yet (the fake's dispatch)."""
    filled = next((s.t for s in tr.samples if s.busy >= 0.95 * slots), None)
    window = [s for s in tr.samples if filled is not None and s.t >= filled and s.queued > 0]
    if not window:
        return {}
    return {
        "no runner Job holds it (operator)": statistics.mean(
            max(0, slots - s.runner_jobs) for s in window
        ),
        "a runner Job, not registered (cluster + fake)": statistics.mean(
            max(0, min(slots, s.runner_jobs) - s.registered) for s in window
        ),
        "registered, not busy (fake)": statistics.mean(
            max(0, s.registered - s.busy) for s in window
        ),
    }


def report(tr: Tracer, slots: int) -> None:
    lost = lost_slots(tr, slots)
    if lost:
        print("idle slots on average while jobs were queued, after the first fill:")
        for name, value in lost.items():
            print(f"  {name:52s} {value:6.1f} of {slots} ({100 * value / slots:.0f}%)")
    print("per runner (a replacement paired first-in, first-out with the runner it replaced):")
    for name, values in breakdown(tr, slots).items():
        print(f"  {name:52s} n={len(values):4d}  {_stats(values)}")
    loops = tr.fake.loop_seconds
    if loops:
        print(f"  the fake's simulation loop: {_stats(loops)} per pass (+0.5s sleep)")


def plot(tr: Tracer, target: str, title: str, slots: int) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib (pip install -e '.[bench]'); no picture drawn")
        return
    t = [s.t for s in tr.samples]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    ax.plot(t, [s.busy for s in tr.samples], label="busy runners", lw=2)
    ax.plot(t, [s.registered for s in tr.samples], label="registered runners", lw=1)
    jobs = [s.runner_jobs for s in tr.samples]
    ax.plot(t, jobs, label="runner Jobs holding a slot", lw=1, ls="--")
    ax.plot(t, [min(s.queued, slots * 1.2) for s in tr.samples], label="queued jobs (clipped)",
            lw=1, ls=":")  # fmt: skip
    ax.axhline(slots, color="grey", lw=0.8)
    ax.set_xlabel("seconds since the jobs were queued")
    ax.set_ylabel("count")
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(target, dpi=90)
    print(f"plot: {target}")
