"""Where a healthy job's pickup waits in the hostile benchmark (``hostile.py --spans DIR``).

The operator runs with debug logs, whose wake-up path lines (the ones webhook_latency.py
reads) give, per healthy group, each step of a job's pickup on the operator's own clock:
the bench queues the job and sends its delivery -> the receiver accepts it -> the group is
woken -> its woken refresh starts and ends (Gitea's answer) -> the next pass starts (the
work queue) -> it sends its creates -> the bench sees the Job (a watch's ADDED event). How
long after the pass's "created runner jobs" line (written once its creates were answered)
the bench saw the Job is shown apart, and so is the pickup the operator's own log gives
(queued -> that line). The k-th job queued for a group is matched with the first step of
each kind after the one before it, so a job served by an earlier refresh or pass shows that
step as 0 or is counted apart. The bench's queue and watch times are kept in
DIR/bench.json beside the operator's log (DIR/operator.log), so the figures can be
recomputed from the files alone:

    python -m tests.benchmarks.hostile_spans DIR
"""

from __future__ import annotations

import bisect
import collections
import itertools
import json
import shutil
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.benchmarks import common

STEPS = (
    "queued -> delivery accepted",
    "accepted -> group woken",
    "woken -> refresh starts",
    "refresh (Gitea's answer)",
    "refresh -> pass starts (work queue)",
    "pass start -> creates sent",
    "creates sent -> seen by the bench",
    "total: queued -> seen",
    "(the pass's 'created' line -> seen)",
    "(queued -> the pass's 'created' line)",
)
# "group woken" is written just before the delivery's own "accepted" line.
WOKEN_SLACK = 0.05
# The group's writer starts the pass's creates once the pass has ended.
WRITER_SLACK = 1.0


def keep_spans(run: Any, op: Any, where: Path) -> None:
    """The operator's log and the bench's queue and watch times (wall clock) into ``where``."""
    where.mkdir(parents=True, exist_ok=True)
    if op.log_path:
        shutil.copy(op.log_path, where / "operator.log")
    bench = {
        "queued": {g: [(run.wall0 + t, phase) for t, phase in q] for g, q in run.queued.items()},
        "seen": {g: sorted(run.wall0 + t for t in c.values()) for g, c in run.created.items()},
    }
    (where / "bench.json").write_text(json.dumps(bench))


def _at(line: dict[str, Any]) -> float:
    return datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00")).timestamp()


def _group_of(key: str) -> str:
    return key.rsplit("/", 1)[-1]


def spans(where: Path) -> dict[str, dict[str, list[float]]]:
    """phase -> step -> seconds, one value per job whose every step was found."""
    bench = json.loads((where / "bench.json").read_text())
    events: dict[tuple[str, str], list[tuple[float, float]]] = collections.defaultdict(list)
    for raw in (where / "operator.log").read_text(errors="replace").splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        name = line.get("event")
        repository = str(line.get("repository"))
        if name == "webhook delivery accepted" and repository.startswith("healthy"):
            for label in line.get("labels") or ():
                events[("accepted", label)].append((_at(line), 0.0))
        elif name in ("group woken", "creating runner jobs", "created runner jobs"):
            events[(name, _group_of(str(line.get("group"))))].append((_at(line), 0.0))
        elif name in ("observed after a wake-up", "reconciled"):
            end = _at(line)
            events[(name, _group_of(str(line.get("group"))))].append((end - line["took"], end))
    for value in events.values():
        value.sort()
    out: dict[str, dict[str, list[float]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    for group, queued in bench["queued"].items():
        seen = bench["seen"].get(group, [])
        for k, (at, phase) in enumerate(queued):
            if k >= len(seen):
                continue
            steps = _steps(events, group, at, seen[k])
            if steps is None:
                out[phase]["(apart: a step not found)"].append(seen[k] - at)
                continue
            for name, value in zip(STEPS, steps, strict=True):
                out[phase][name].append(value)
    return out


def _next(events: list[tuple[float, float]], after: float) -> tuple[float, float] | None:
    i = bisect.bisect_left(events, (after, float("-inf")))
    return events[i] if i < len(events) else None


def _steps(
    events: dict[tuple[str, str], list[tuple[float, float]]],
    group: str,
    queued: float,
    seen: float,
) -> list[float] | None:
    accepted = _next(events[("accepted", group)], queued)
    if accepted is None:
        return None
    woken = _next(events[("group woken", group)], accepted[0] - WOKEN_SLACK)
    refresh = next(
        (r for r in events[("observed after a wake-up", group)] if woken and r[1] >= woken[0]),
        None,
    )
    if woken is None or refresh is None:
        return None
    begin = max(refresh[0], woken[0])
    rec = _next(events[("reconciled", group)], refresh[1])
    if rec is None:
        return None
    sent = _next(events[("creating runner jobs", group)], rec[0])
    done = _next(events[("created runner jobs", group)], sent[0] if sent else rec[0])
    # The pass hands its creates to its group's writer, which logs "creating" once the pass
    # has ended: the creates are the first ones after the pass's start, if they came at once
    # (else the pass created nothing, and these are a later job's).
    if sent is None or done is None or sent[0] > rec[1] + WRITER_SLACK:
        return None
    points = [queued, accepted[0], woken[0], begin, refresh[1], rec[0], sent[0], seen]
    steps = [max(0.0, b - a) for a, b in itertools.pairwise(points)]
    return [*steps, seen - queued, seen - done[0], done[0] - queued]


def print_spans(where: Path) -> None:
    table = spans(where)
    print()
    print(f"{'a healthy job pickup, step by step':<38} {'phase':>9} {'n':>4} {'p50':>7} {'p99':>7}")
    for phase in ("baseline", "attack"):
        for name, values in sorted(table.get(phase, {}).items(), key=_order):
            p50, p99 = (common.percentile(values, q) for q in (0.5, 0.99))
            print(f"{name:<38} {phase:>9} {len(values):>4} {p50:6.3f}s {p99:6.3f}s")


def _order(item: tuple[str, list[float]]) -> int:
    return STEPS.index(item[0]) if item[0] in STEPS else len(STEPS)


if __name__ == "__main__":
    print_spans(Path(sys.argv[1]))
