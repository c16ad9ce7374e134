"""Jobs survive lost runners, on the testbed with real Gitea and runner processes.

A long job runs on a runner Pod the kubelet harness started; the runner is then lost (its
process killed, its Pod evicted through the Eviction API, OOM-killed, or its node tainted
away); Gitea fails the job from its zombie-task cron (the testbed's app.ini: 30 s, checked
every 5 s); the operator re-runs it; a fresh runner takes the re-run, which ends ``success``.
A job whose step exits 1 is never re-run. Each test prints the time from the loss to the
operator's re-run call and to the re-run job's start in Gitea.

What is simulated, and why: there is no container runtime, so "OOMKilled" is the harness
reporting what a kubelet would (exit 137, reason OOMKilled) after a SIGKILL, and node loss is
the taint-based deletion (``DeletionByTaintManager``) the node lifecycle controller does for
an unreachable node, triggered by a NoExecute taint on the harness node instead of waiting
out the default 300 s ``tolerationSeconds``.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support import manifests
from tests.support.testbed import (
    make_tokens,
    runner_group,
    runner_jobs,
    wait_until,
)
from tests.testbed.kubelet_harness import HARNESS_NODE

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

LABEL = "gro-lost"


def workflow(marker: Path) -> str:
    # The first attempt sleeps (and is lost); the re-run finds the marker and succeeds.
    return f"""\
name: lost
on: [push]
jobs:
  long:
    runs-on: {LABEL}
    steps:
      - run: if [ -e {marker} ]; then echo "re-run"; else touch {marker}; sleep 600; fi
"""


FAILING = f"""\
name: fails
on: [push]
jobs:
  fails:
    runs-on: {LABEL}
    steps:
      - run: echo "a step that fails by itself" && exit 1
"""


def _records(kube: Any, ns: str, name: str) -> dict[str, dict[str, Any]]:
    group = kube.get(f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups/{name}")
    losses = (group.get("status") or {}).get("losses") or {}  # api/loss.py
    return {k: json.loads(v) for k, v in losses.items()}


def _jobs(gitea: Any, org: str, repo: str, name: str) -> list[dict[str, Any]]:
    return sorted(
        (j for j in gitea.list_jobs("repo", org, repo, status=None) if j["name"] == name),
        key=lambda j: j["id"],
    )


def _ts(value: str) -> float:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _metric(port: int, name: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return "\n".join(line for line in text.splitlines() if line.startswith(name))


def lose_and_rerun(
    *,
    kube: Any,
    gitea: Any,
    cluster: Any,
    ns: str,
    target: Any,
    start_operator: Any,
    harness: Any,
    tmp_path: Path,
    lose: Callable[[str], None],
    cause: str,
    recover: Callable[[], None] = lambda: None,
    with_failing: bool = False,
) -> dict[str, float]:
    org, repo = target.org, target.repo
    make_tokens(kube, ns, cluster, target)
    op = start_operator(ns)
    manifests.apply(
        kube,
        runner_group("lost", target=target, url=cluster.gitea_url, labels=[LABEL],
                     maxActiveRunners=3, terminationGracePeriod="5s"),
        namespace=ns,
    )  # fmt: skip
    gitea.push_workflow(org, repo, "lost.yml", workflow(tmp_path / "marker"))
    if with_failing:
        gitea.push_workflow(org, repo, "fails.yml", FAILING)

    running = wait_until(
        lambda: next(
            (j for j in _jobs(gitea, org, repo, "long") if j["status"] == "in_progress"), None
        ),
        timeout=120,
        what="the long job running",
    )
    pod = running["runner_name"]
    # the operator saw it busy (or the registration is listed busy): it held a job
    wait_until(
        lambda: any(
            (j["metadata"].get("annotations") or {}).get("gitea.bpg.pw/took-job") == "true"
            for j in runner_jobs(kube, ns, "lost")
        ),
        timeout=60,
        what="took-job on the runner Job",
    )
    lost_at = time.time()
    lose(pod)

    (record,) = wait_until(
        lambda: [r for r in _records(kube, ns, "lost").values() if r.get("state") == "rerun"],
        timeout=150,
        what="the operator re-ran the job",
    )
    recover()
    assert record["pod"] == pod and record["cause"] == cause, record
    rerun_call = time.time()
    repo_api = f"/repos/{org}/{repo}/actions/jobs"
    again = wait_until(
        lambda: (
            (j := gitea.get(f"{repo_api}/{record['rerun_job_id']}"))["status"] == "completed" and j
        ),
        timeout=150,
        what="the re-run completed",
    )
    first = gitea.get(f"{repo_api}/{record['job_id']}")
    assert first["name"] == again["name"] == "long"
    assert (first["status"], first["conclusion"]) == ("completed", "failure"), first
    assert again["conclusion"] == "success", (again, harness.errors)
    assert again["runner_name"] != pod  # a fresh runner took it

    events = kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
    (rerun_event,) = [e for e in events if e["reason"] == "JobRerun"]
    assert pod in rerun_event["message"] and cause in rerun_event["message"]
    assert "long" in rerun_event["message"]
    reason = "Signal" if cause.startswith("Signal") else cause
    assert f'reason="{reason}"' in _metric(op.health_port, "gitea_runner_operator_jobs_rerun_total")
    # the lost runner left no registration behind
    assert pod not in {r["name"] for r in gitea.list_runners("org", owner=org)}

    if with_failing:
        (failed,) = _jobs(gitea, org, repo, "fails")
        assert (failed["status"], failed["conclusion"]) == ("completed", "failure")
        # its runner exited normally: no loss recorded, never re-run
        assert all(r.get("job_name") != "fails" for r in _records(kube, ns, "lost").values())

    figures = {
        "loss_to_rerun_call_s": round(record["settled_at"] - lost_at, 1),
        "loss_to_rerun_start_s": round(_ts(again["started_at"]) - lost_at, 1),
        "observed_after_s": round(rerun_call - lost_at, 1),
    }
    print(f"\n[lost-runners] {cause}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))
    return figures


def test_a_job_whose_runner_process_is_killed_is_rerun_and_a_failing_job_is_not(
    kube, gitea, cluster, team_namespace, gitea_target, start_operator, kubelet_harness, tmp_path
):
    lose_and_rerun(
        kube=kube, gitea=gitea, cluster=cluster, ns=team_namespace, target=gitea_target,
        start_operator=start_operator, harness=kubelet_harness, tmp_path=tmp_path,
        lose=lambda pod: kubelet_harness.kill(pod), cause="Signal9", with_failing=True,
    )  # fmt: skip


@pytest.mark.faults
def test_an_evicted_runners_job_is_rerun(
    kube, gitea, cluster, team_namespace, gitea_target, start_operator, kubelet_harness, tmp_path
):
    ns = team_namespace

    def evict(pod: str) -> None:
        kube.post(
            f"/api/v1/namespaces/{ns}/pods/{pod}/eviction",
            {"apiVersion": "policy/v1", "kind": "Eviction",
             "metadata": {"name": pod, "namespace": ns}},
        )  # fmt: skip

    lose_and_rerun(
        kube=kube, gitea=gitea, cluster=cluster, ns=ns, target=gitea_target,
        start_operator=start_operator, harness=kubelet_harness, tmp_path=tmp_path,
        lose=evict, cause="EvictionByEvictionAPI",
    )  # fmt: skip


@pytest.mark.faults
def test_an_oom_killed_runners_job_is_rerun(
    kube, gitea, cluster, team_namespace, gitea_target, start_operator, kubelet_harness, tmp_path
):
    lose_and_rerun(
        kube=kube, gitea=gitea, cluster=cluster, ns=team_namespace, target=gitea_target,
        start_operator=start_operator, harness=kubelet_harness, tmp_path=tmp_path,
        lose=lambda pod: kubelet_harness.kill(pod, oom=True), cause="OOMKilled",
    )  # fmt: skip


@pytest.mark.faults
def test_a_runner_whose_node_is_lost_has_its_job_rerun(
    kube, gitea, cluster, team_namespace, gitea_target, start_operator, kubelet_harness, tmp_path
):
    node = f"/api/v1/nodes/{HARNESS_NODE}"
    taint = {"key": "gro-testbed/node-lost", "value": "true", "effect": "NoExecute"}

    def taint_node(pod: str) -> None:
        taints = kube.get(node)["spec"].get("taints") or []
        kube.patch(node, {"spec": {"taints": [*taints, taint]}})

    def untaint() -> None:
        taints = kube.get(node)["spec"].get("taints") or []
        kube.patch(node, {"spec": {"taints": [t for t in taints if t["key"] != taint["key"]]}})

    try:
        lose_and_rerun(
            kube=kube, gitea=gitea, cluster=cluster, ns=team_namespace, target=gitea_target,
            start_operator=start_operator, harness=kubelet_harness, tmp_path=tmp_path,
            lose=taint_node, cause="DeletionByTaintManager", recover=untaint,
        )  # fmt: skip
    finally:
        untaint()
