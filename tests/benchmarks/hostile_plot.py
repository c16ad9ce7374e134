"""The hostile benchmark's picture: the operator's RSS and each healthy job's queued -> runner
Job latency over time, the attack shaded, the chart's memory limit drawn (matplotlib, the
``bench`` extra, drawn the way webhook_latency.py draws docs/scale-up.png)."""

from __future__ import annotations

CHART_LIMIT_MIB = 384  # charts/gitea-runner-operator/values.yaml: resources.limits.memory


def plot(
    rss: list[tuple[float, float]],
    latencies: list[tuple[float, float, str]],
    attack: tuple[float | None, float | None],
    target: str,
) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib (pip install matplotlib); no picture drawn")
        return
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    top.plot([t for t, _ in rss], [r for _, r in rss], label="operator RSS")
    top.axhline(CHART_LIMIT_MIB, color="red", linestyle="--", label="chart memory limit")
    top.set_ylabel("MiB")
    top.legend(loc="center left")
    bottom.scatter([t for t, _, _ in latencies], [d for _, d, _ in latencies], s=6)
    bottom.set_ylabel("queued -> runner Job (s)")
    bottom.set_xlabel("seconds")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        start, end = attack
        if start is not None:
            end = end if end is not None else max(t for t, _ in rss)
            ax.axvspan(start, end, color="orange", alpha=0.15, label="attack")
    top.set_title("20 healthy groups while hostile tenants attack (shaded)")
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    print(f"drew {target}")
