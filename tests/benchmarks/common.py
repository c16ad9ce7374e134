"""Shared set-up for the benchmarks: the testbed, the operator's manifests, team namespaces as
a team prepares them, the operator as a subprocess with its own ServiceAccount, and readers
of its /metrics and its process statistics. Benchmarks print figures; they assert nothing."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support import manifests
from tests.support.launcher import OPERATOR_NS, OPERATOR_SA, OperatorProcess, launch
from tests.support.testbed import allow_secrets, make_namespace, make_secret
from tests.testbed.kube import KubeClient
from tests.testbed.sandbox import Sandbox

KWOK_IMAGE = "kwok.invalid/act_runner:complete-after-3600s"
# How long the operator's ServiceAccount token lives in a benchmark (seconds).
BENCH_TOKEN_SECONDS = 86_400


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


@contextlib.contextmanager
def operator(
    sandbox: Sandbox,
    namespaces: list[str],
    *extra: str,
    leader_elect: bool = False,
    memprobe: Path | None = None,
    cpuprobe: Path | None = None,
    env: dict[str, str] | None = None,
    cgroup: Path | None = None,
    cpus: set[int] | None = None,
) -> Iterator[OperatorProcess]:
    """The operator as a subprocess; with ``memprobe`` (a directory) under tracemalloc, with
    ``cpuprobe`` under a sampling CPU profiler."""
    kube = sandbox.kube
    assert kube is not None
    # A day's token: the TokenRequest default (an hour) ended the first 2-hour soak at minute
    # 60 with every request 401 (a kubeconfig's token is not re-read, unlike in a Pod).
    token = kube.create_token(OPERATOR_NS, OPERATOR_SA, seconds=BENCH_TOKEN_SECONDS)
    kubeconfig = sandbox.kubeconfig_for_token(token)
    op = launch(
        kubeconfig,
        namespaces,
        log_path=sandbox.workdir / f"operator-{uuid.uuid4().hex[:6]}.log",
        extra=extra,
        leader_election_namespace=OPERATOR_NS if leader_elect else None,
        memprobe=memprobe,
        cpuprobe=cpuprobe,
        env=env,
        cgroup=cgroup,
        cpus=cpus,
    )
    try:
        for _ in range(120):
            with contextlib.suppress(Exception):
                op.metrics()
                break
            time.sleep(0.5)
        yield op
    finally:
        op.stop()


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


def writes_by_kind(
    metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float],
) -> dict[str, float]:
    """Writes so far by verb and resource (``create jobs``, ``patch runnergroups/status``)."""
    out: dict[str, float] = {}
    for (name, labels), value in metrics.items():
        if name == "gitea_runner_operator_kube_writes_total":
            d = dict(labels)
            kind = f"{d.get('verb', '?')} {d.get('resource', '?')}"
            out[kind] = out.get(kind, 0.0) + value
    return out
