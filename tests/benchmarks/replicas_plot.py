"""The replicas benchmark's picture, from its ``--json`` file: per replica count, each
replica's RSS, CPU and Gitea requests (RSS beside the earlier 2,000-group run's, whose
informers kept every group's objects), and the fill time (matplotlib, the ``bench`` extra).

    python -m tests.benchmarks.replicas_plot FIGURES.json docs/replicas.png
"""

from __future__ import annotations

import json
import sys
from typing import Any

# docs/benchmarks.md, the 2,000-group run of 2026-11-27 (9bac564's parent): every replica
# cached every group's runner Jobs and Pods, and renewed its Lease on the main loop.
BEFORE_RSS = {1: [205.6], 2: [198.6, 186.8], 3: [176.6, 146.0, 149.8]}


def plot(figures: dict[str, Any], target: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("needs matplotlib (pip install matplotlib); no picture drawn")
        return
    cost = {int(n): v["replicas"] for n, v in figures["cost"].items()}
    fill = {int(n): v for n, v in figures.get("fill", {}).items()}
    counts = sorted(cost)
    fig, (rss, cpu, gitea, fills) = plt.subplots(1, 4, figsize=(16, 4))
    for n in counts:
        xs = [n + (i - (n - 1) / 2) * 0.12 for i in range(n)]
        rss.scatter(xs, [r["rss"] for r in cost[n]], color="tab:blue", zorder=3)
        cpu.scatter(xs, [r["cpu"] for r in cost[n]], color="tab:green", zorder=3)
        gitea.scatter(xs, [r["gitea"] for r in cost[n]], color="tab:orange", zorder=3)
        old = BEFORE_RSS.get(n, [])
        rss.scatter(
            [n + (i - (len(old) - 1) / 2) * 0.12 for i in range(len(old))],
            old,
            color="tab:gray",
            marker="x",
            zorder=3,
        )
    rss.scatter([], [], color="tab:blue", label="this run, each replica")
    rss.scatter([], [], color="tab:gray", marker="x", label="2026-11-27: informers unfiltered")
    rss.set_ylabel("RSS per replica (MB)")
    rss.legend(loc="lower left", fontsize=8)
    cpu.set_ylabel("CPU per replica (cores)")
    gitea.set_ylabel("Gitea requests/s per replica")
    if fill:
        ns = sorted(fill)
        fills.bar(
            [n - 0.2 for n in ns], [fill[n]["created_s"] or 0 for n in ns], 0.4, label="created"
        )
        fills.bar(
            [n + 0.2 for n in ns], [fill[n]["taken_s"] or 0 for n in ns], 0.4, label="running"
        )
        fills.set_ylabel(f"fill of {fill[ns[0]]['jobs']} jobs (s)")
        fills.legend(loc="lower left", fontsize=8)
    for ax in (rss, cpu, gitea, fills):
        ax.set_xticks(counts)
        ax.set_xlabel("replicas")
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
    groups = sum(r["held"] for r in cost[counts[0]])
    fig.suptitle(f"{groups} quiet groups over 1 to 3 replicas (--sharding)")
    fig.tight_layout()
    fig.savefig(target, dpi=110)


def main(argv: list[str] | None = None) -> int:
    source, target = (argv if argv is not None else sys.argv[1:])[:2]
    with open(source) as f:
        plot(json.load(f), target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
