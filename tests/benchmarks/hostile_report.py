"""The hostile benchmark's figures (hostile.py): what each phase cost the healthy groups,
the operator, the Lease and the API server every tenant shares, printed from what a run
(hostile.Run) recorded."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
from typing import TYPE_CHECKING, Any

from prometheus_client.parser import text_string_to_metric_families

from tests.benchmarks import common

if TYPE_CHECKING:
    from tests.benchmarks.hostile import Run

LAG = "gitea_runner_operator_event_loop_lag_seconds"
RENEW_DEADLINE = 10.0  # settings.renew_deadline


def report(
    run: Run,
    counts: dict[str, Any],
    before: dict[str, str],
    after: dict[str, str],
    load: tuple[float, float, float],
    args: argparse.Namespace,
) -> None:
    print()
    print(
        f"{'phase':>9} {'jobs':>5} {'p50':>8} {'p99':>8} {'max':>8} {'/healthz gap':>13}"
        "  genuine deliveries"
    )
    lat = run.latencies
    for phase in ("baseline", "attack"):
        values = [d for _, d, p in lat if p == phase]
        queued = sum(1 for q in run.queued.values() for _, p in q if p == phase)
        p50, p99 = (common.percentile(values, q) if values else float("nan") for q in (0.5, 0.99))
        print(
            f"{phase:>9} {len(values):>3}/{queued:<3} {p50:7.2f}s {p99:7.2f}s "
            f"{max(values, default=float('nan')):7.2f}s {run.stall(phase):12.2f}s  "
            f"{dict(run.deliveries.get(phase, {}))}"
        )
    for phase in ("baseline", "attack"):
        trips = run.round_trips.get(phase) or [float("nan")]
        print(
            f"genuine deliveries, {phase}: queued -> answered (Gitea's side) p50 "
            f"{common.percentile(trips, 0.5) * 1e3:.0f} ms, p99 "
            f"{common.percentile(trips, 0.99) * 1e3:.0f} ms, max {max(trips) * 1e3:.0f} ms"
        )
    for (phase, a), (_, b) in itertools.pairwise(run.lag.items()):
        p50, p99, worst = _lag_figures({le: b[le] - a.get(le, 0.0) for le in b})
        print(f"event loop lag, {phase}: p50 {p50}, p99 {p99}, max {worst}")
    for line in api_lines(run.api, {phase: at for phase, (at, _) in run.cpu.items()}):
        print(line)
    print(
        f"operator log: {counts.get('stalled', 0)} 'event loop stalled' lines (worst "
        f"{counts.get('worst_stall', 0.0):.2f} s), {counts.get('unmatched', 0)} 'unmatched "
        f"jobs' lines, {counts.get('tracebacks', 0)} tracebacks"
    )
    marks = list(run.cpu.values())
    cores = [(c1 - c0) / max(1e-9, t1 - t0) for (t0, c0), (t1, c1) in itertools.pairwise(marks)]
    phases = ", ".join(f"{n} {c:.2f}" for n, c in zip(run.cpu, cores, strict=False))
    print(f"operator CPU, cores used per phase (the attack's includes the drain): {phases}")
    for line in run.share.lines():
        print(line)
    missed, longest, changes = run.lease()
    peak = run.peak
    print(
        f"operator peak RSS {peak:.0f} MiB (chart limit 384 Mi); Lease: {missed} renewals "
        f"missed (gap > {RENEW_DEADLINE:.0f} s), longest gap {longest:.1f} s, {changes} "
        "leader changes"
    )
    if run.cgroup:
        print(run.cgroup)
    print(
        f"forged deliveries {counts.get('forged')}; silent connections ended by "
        f"{counts.get('held')}; hostile forge requests {counts.get('requests')}"
    )
    if run.wrong:
        print(f"wrong-secret hook deliveries from Gitea's address: {dict(run.wrong)}")
    if run.revoked_at is not None:
        last = (counts.get("last") or {}).get("revoke")
        after_revoked = None if last is None else last - run.revoked_at
        used = "never" if after_revoked is None or after_revoked < 0 else f"{after_revoked:.1f} s"
        print(f"revoked token (group deleted, then its label removed): last used after: {used}")
    kept = sorted(k for k in before if after.get(k) == before[k])
    print(
        f"the other application's db-cache objects intact after cache on/off: {kept} "
        f"of {sorted(before)}"
    )
    print(
        f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"{args.groups} healthy groups, a job every {args.every}s, poll {args.poll}"
        + ("" if args.operator_cpu is None else f"; the operator alone on CPU {args.operator_cpu}")
    )


def lag_buckets(
    metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float],
) -> dict[float, float]:
    """The loop-lag histogram's cumulative buckets: upper bound -> wakes at most that late."""
    return {
        float(dict(labels)["le"]): value
        for (name, labels), value in metrics.items()
        if name == f"{LAG}_bucket"
    }


def _lag_figures(buckets: dict[float, float]) -> tuple[str, str, str]:
    """p50, p99 and max of a phase's wakes, each as the bucket bound it falls under."""
    bounds = sorted(buckets)
    count = buckets.get(float("inf"), 0.0)
    if not count:
        return ("n/a",) * 3

    def under(rank: float) -> str:
        le = next(b for b in bounds if buckets[b] >= rank)
        return "> 10 s" if le == float("inf") else f"<= {le * 1000:g} ms"

    return under(0.5 * count), under(0.99 * count), under(count)


def log_counts(text: str) -> dict[str, Any]:
    """What the operator's JSON log says of stalls, unmatched jobs and tracebacks."""
    stalled, unmatched, tracebacks, worst = 0, 0, 0, 0.0
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            event = entry.get("event")
            if event == "event loop stalled":
                stalled += 1
                worst = max(worst, entry.get("lag_s", 0.0), entry.get("worst_held_back_s", 0.0))
            elif event == "unmatched jobs":
                unmatched += 1
            if "exception" in entry:
                tracebacks += 1
    return {
        "stalled": stalled,
        "worst_stall": worst,
        "unmatched": unmatched,
        "tracebacks": tracebacks,
    }


def peak_rss(run: Run) -> float:
    """The operator's peak RSS (VmHWM: the kernel's high-water mark, no sample missed)."""
    with contextlib.suppress(OSError):
        for line in open(f"/proc/{run.op.proc.pid}/status"):  # noqa: SIM115
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return max((r for _, r in run.rss), default=0.0)


# -- the API server every tenant shares --------------------------------------------------------

READS = {"GET", "LIST", "WATCH", "WATCHLIST", "CONNECT", "APPLY_READ"}
CREATE_DURATION = "apiserver_request_duration_seconds_bucket"


def api_figures(text: str) -> dict[tuple[str, ...], float]:
    """From the API server's /metrics: ("writes" or "reads", verb, resource) -> requests so
    far; ("create jobs", le) -> Job creates answered within ``le`` seconds so far (the API
    server's own time for each, which a runner create's round trip includes)."""
    out: dict[tuple[str, ...], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            verb, resource = labels.get("verb", ""), labels.get("resource", "")
            if labels.get("subresource"):
                resource += "/" + labels["subresource"]
            key: tuple[str, ...]
            if sample.name == "apiserver_request_total":
                key = ("reads" if verb in READS else "writes", verb, resource)
            elif sample.name == CREATE_DURATION and verb == "POST" and resource == "jobs":
                key = ("create jobs", labels.get("le", ""))
            else:
                continue
            out[key] = out.get(key, 0.0) + sample.value
    return out


def api_lines(
    marks: dict[str, dict[tuple[str, ...], float]], started: dict[str, float]
) -> list[str]:
    """Per phase: the API server's writes and reads a second by verb and resource (the
    busiest) and its own time for Job creates (p50, p99 and max as the bucket bound they fall
    under)."""
    lines = []
    for (phase, a), (after, b) in itertools.pairwise(marks.items()):
        seconds = max(1e-9, started.get(after, 0.0) - started.get(phase, 0.0))
        delta = {k: v - a.get(k, 0.0) for k, v in b.items()}
        if not any(v for k, v in delta.items() if k[0] == "writes"):
            continue  # a phase of no time (the drain, when nothing was left to drain)
        for kind in ("writes", "reads"):
            rates = sorted(
                ((v / seconds, f"{k[1]} {k[2]}") for k, v in delta.items() if k[0] == kind),
                reverse=True,
            )
            total = sum(rate for rate, _ in rates)
            busiest = ", ".join(f"{name} {rate:.1f}" for rate, name in rates[:6] if rate > 0)
            lines.append(f"API server {kind}/s, {phase}: {total:.1f} in all; {busiest}")
        buckets = {float(k[1]): v for k, v in delta.items() if k[0] == "create jobs"}
        if buckets:
            p50, p99, worst = _lag_figures(buckets)
            slow = buckets.get(float("inf"), 0.0) - buckets.get(0.025, 0.0)
            lines.append(
                f"API server's own time per Job create, {phase}: p50 {p50}, p99 {p99}, max "
                f"{worst}; {slow:.0f} of {buckets.get(float('inf'), 0.0):.0f} over 25 ms"
            )
    return lines
