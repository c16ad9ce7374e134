"""Shared set-up for the benchmarks: the testbed, the operator's manifests, team namespaces as
a team prepares them, the operator as a subprocess with its own ServiceAccount, and readers
of its /metrics and its process statistics. Benchmarks print figures; they assert nothing."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.integration import manifests
from tests.integration.conftest import allow_secrets, free_port, make_namespace, make_secret
from tests.testbed.kube import KubeClient
from tests.testbed.sandbox import Sandbox

OPERATOR = ("gitea-runner-operator", "gitea-runner-operator")
KWOK_IMAGE = "kwok.invalid/act_runner:complete-after-3600s"


def install(sandbox: Sandbox) -> KubeClient:
    kube = sandbox.kube
    assert kube is not None
    for name in ("crd.yaml", "namespace.yaml", "serviceaccount.yaml", "rbac.yaml"):
        for obj in manifests.load(name):
            manifests.apply(kube, obj)
    time.sleep(2)
    return kube


def team(kube: KubeClient, ns: str, registration: str, api_token: str) -> None:
    make_namespace(kube, ns)
    allow_secrets(kube, ns)
    make_secret(kube, ns, "tokens", {"registration": registration, "api": api_token})


def group(name: str, org: str, url: str, labels: list[str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gitea.bpg.pw/v1alpha1",
        "kind": "RunnerGroup",
        "metadata": {"name": name},
        "spec": {
            "scope": "org",
            "org": org,
            "gitea": {"url": url},
            "labels": labels,
            "maxActiveRunners": 10,
            "image": KWOK_IMAGE,
            "registrationToken": {"secretRef": {"name": "tokens", "key": "registration"}},
            "authToken": {"secretRef": {"name": "tokens", "key": "api"}},
            **spec,
        },
    }


@dataclass
class Operator:
    proc: subprocess.Popen[bytes]
    health_port: int
    webhook_port: int
    log_path: Path | None = None

    def log_count(self, text: str) -> int:
        """Lines of the operator's log that contain ``text``."""
        if self.log_path is None:
            return 0
        return sum(1 for line in self.log_path.read_text().splitlines() if text in line)

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.health_port}/metrics", timeout=10
        ) as resp:
            text = resp.read().decode()
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def snapshot(self) -> None:
        """Ask an operator started with ``memprobe`` for a tracemalloc snapshot (memprobe.py)."""
        self.proc.send_signal(signal.SIGUSR2)

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0


@contextlib.contextmanager
def operator(
    sandbox: Sandbox,
    namespaces: list[str],
    *extra: str,
    leader_elect: bool = False,
    memprobe: Path | None = None,
) -> Iterator[Operator]:
    """The operator as a subprocess; with ``memprobe`` (a directory) under tracemalloc, its
    snapshots written there on ``Operator.snapshot()``."""
    kube = sandbox.kube
    assert kube is not None
    token = kube.create_token(*OPERATOR)
    kubeconfig = sandbox.kubeconfig_for_token(token)
    health, hook = free_port(), free_port()
    log_path = sandbox.workdir / f"operator-{health}.log"
    log = open(log_path, "wb")  # noqa: SIM115
    args = [
        sys.executable, "-m",
        *(["tests.benchmarks.memprobe", str(memprobe)] if memprobe else ["gitea_runner_operator"]),
        "--kubeconfig", str(kubeconfig),
        *([] if leader_elect else ["--no-leader-elect"]),
        "--health-host", "127.0.0.1", "--health-port", str(health),
        "--webhook-host", "127.0.0.1", "--webhook-port", str(hook), "--log-format", "json",
        *[a for ns in namespaces for a in ("--namespace", ns)], *extra,
    ]  # fmt: skip
    proc = subprocess.Popen(
        args, stdout=log, stderr=subprocess.STDOUT,
        env={k: v for k, v in os.environ.items() if k != "KUBECONFIG"},
    )  # fmt: skip
    op = Operator(proc, health, hook, log_path)
    try:
        for _ in range(120):
            with contextlib.suppress(Exception):
                op.metrics()
                break
            time.sleep(0.5)
        yield op
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def total(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> float:
    return sum(v for (n, _), v in metrics.items() if n == name)


def histogram_quantile(
    metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, q: float
) -> float | None:
    """A quantile from a histogram's cumulative buckets (all label sets summed), as
    Prometheus' histogram_quantile does, interpolating within the bucket."""
    buckets: dict[float, float] = {}
    for (n, labels), value in metrics.items():
        if n == f"{name}_bucket":
            le = float(dict(labels)["le"])
            buckets[le] = buckets.get(le, 0.0) + value
    if not buckets:
        return None
    bounds = sorted(buckets)
    count = buckets[bounds[-1]]
    if count == 0:
        return None
    rank, lower, below = q * count, 0.0, 0.0
    for le in bounds:
        if buckets[le] >= rank:
            if le == float("inf"):
                return lower
            inside = buckets[le] - below
            return lower + (le - lower) * ((rank - below) / inside if inside else 0)
        lower, below = le, buckets[le]
    return None


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]
