"""Why is my job waiting? Against the real API server and a real Gitea, each cause shows up
where the user looks: the Event, the group's status, the metric, and ``why <job URL>``.

Written for issue 26; covers a typo label and a group at capacity. The other causes (an
uncovered repository, a quota refusal, Pods that never start and a peer serving the job)
are in test_why_causes.py."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.support.builders import workflow
from tests.support.testbed import (
    events,
    group_status,
    kwok_image,
    metrics,
    wait_until,
    why,
)

pytestmark = pytest.mark.integration

TYPO = workflow("typo", {"build": "gro-linx"})

THREE = workflow("three", dict.fromkeys("abc", "gro-linux"))


def test_a_typo_label_is_named_with_the_label_it_meant(kube, gitea, cluster, team, start_operator):
    ns, org, repo = team.ns, team.org, team.repo
    gitea.push_workflow(org, repo, "typo.yml", TYPO)
    (job,) = gitea.wait_for_jobs(org, repo, "queued", count=1)
    operator = start_operator(ns)
    team.group("ci")

    warning = wait_until(
        lambda: next((e for e in events(kube, ns) if e["reason"] == "UnmatchedJobs"), None),
        what="an UnmatchedJobs Event",
    )
    assert warning["type"] == "Warning"
    assert warning["involvedObject"]["name"] == "ci"
    assert "runs-on [gro-linx]" in warning["message"]
    assert "did you mean 'gro-linux'?" in warning["message"]
    assert job["url"] in warning["message"]
    wait_until(
        lambda: 'labels="gro-linx"} 1.0' in metrics(operator.health_port),
        what="the unmatched_jobs metric",
    )
    assert group_status(kube, ns, "ci").get("queuedJobs") == 0  # not this group's demand

    text = why(cluster, ns, job["url"])
    assert "Could serve it: none" in text
    assert f"{ns}/ci: it does not offer 'gro-linx' (it offers 'gro-linux')" in text
    assert "did you mean 'gro-linux'" in text


def test_a_group_at_capacity_says_so_in_status_metrics_and_why(
    kube, gitea, cluster, team, start_operator, kwok
):
    ns, org, repo = team.ns, team.org, team.repo
    gitea.push_workflow(org, repo, "three.yml", THREE)
    jobs = gitea.wait_for_jobs(org, repo, "queued", count=3)
    operator = start_operator(ns)
    # kwok keeps the runner Pods running, unregistered: two runners "starting", at the max.
    team.group("ci", image=kwok_image(600))

    status = wait_until(
        lambda: (s := group_status(kube, ns, "ci")).get("waiting", {}).get("atCapacity") == 1 and s,
        what="status.waiting.atCapacity == 1",
    )
    assert status["waiting"]["startingRunner"] == 2
    assert status["waiting"]["heldBack"]["count"] == 0
    assert status["waiting"]["servedByPeer"] == {"count": 0, "groups": []}
    assert status["oldestQueuedTime"].endswith("Z")
    if kubectl := shutil.which("kubectl"):  # optional in the testbed
        printed = subprocess.run(
            [kubectl, "--kubeconfig", str(cluster.kubeconfig), "-n", ns, "get", "rg", "ci"],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        assert "OLDEST WAITING" in printed.stdout
    text = metrics(operator.health_port)
    assert f'gitea_runner_operator_waiting_jobs{{namespace="{ns}",reason="at_capacity",' in text

    newest = max(jobs, key=lambda j: j["id"])
    out = why(cluster, ns, newest["url"])
    assert f"Should serve it: {ns}/ci" in out
    assert "at maxActiveRunners (2 of 2 active)" in out
