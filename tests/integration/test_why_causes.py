"""Why is my job waiting? The causes test_why.py does not cover (a typo label, a group at
capacity), each produced against the real API server and a real Gitea, and each asserted
where the user looks: the Event or the group's status, the metric, and ``why <job URL>``.

- an uncovered repository: a group offers the labels, but its scope is another repository;
- a quota-refused group: the namespace's ResourceQuota allows no Job;
- runner Pods that never start: the namespace's ResourceQuota allows no Pod;
- a job served by a peer: an org group and a repo group offer the same labels.

Written for issue 26. Each test prints what ``why`` printed (visible with ``-s``);
docs/troubleshooting.md shows that output."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.builders import workflow
from tests.support.testbed import (
    condition,
    events,
    group_status,
    kwok_image,
    make_secret,
    metrics,
    runner_jobs,
    sample,
    wait_until,
    why,
)

pytestmark = pytest.mark.integration

GPU = workflow("gpu", {"train": "gro-gpu"})

ONE = workflow("one", {"build": "gro-linux"})


def metric(port: int, name: str, **labels: str) -> float | None:
    """The value of one series of the operator's /metrics, None when it is absent."""
    for family in text_string_to_metric_families(metrics(port)):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


def series(port: int, name: str) -> str:
    """The lines of one metric as a scrape shows them."""
    return "\n".join(line for line in metrics(port).splitlines() if line.startswith(name + "{"))


def show(title: str, job_url: str, out: str, **extra: Any) -> None:
    """What the user saw, for ``-s`` and for docs/troubleshooting.md."""
    print(f"\n[{title}]\n$ gitea-runner-operator why {job_url} --token ...\n{out}")
    for key, value in extra.items():
        print(f"{key}: {value if isinstance(value, str) else json.dumps(value)}")


def get_rg(cluster: Any, ns: str) -> str:
    """``kubectl get rg`` as a user prints it; kubectl is optional in the testbed."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return "(kubectl not installed)"
    printed = subprocess.run(
        [kubectl, "--kubeconfig", str(cluster.kubeconfig), "-n", ns, "get", "rg"],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return printed.stdout


def quota(kube: Any, ns: str, hard: dict[str, str]) -> None:
    """A ResourceQuota, waited for until the quota controller has counted it (before that,
    admission does not enforce it)."""
    kube.post(
        f"/api/v1/namespaces/{ns}/resourcequotas",
        {"metadata": {"name": "runners"}, "spec": {"hard": hard}},
    )
    wait_until(
        lambda: (
            kube.get(f"/api/v1/namespaces/{ns}/resourcequotas/runners")
            .get("status", {})
            .get("hard")
        ),
        what="quota status",
    )


def repo_tokens(kube: Any, ns: str, cluster: Any, gitea: Any, org: str, repo: str) -> dict:
    """A Secret with the repository's own registration token, and the group's references."""
    name = f"tokens-{repo}"
    token = gitea.registration_token("repo", owner=org, repo=repo)
    make_secret(kube, ns, name, {"registration": token, "api": cluster.gitea_token})
    return {
        "registrationToken": {"secretRef": {"name": name, "key": "registration"}},
        "authToken": {"secretRef": {"name": name, "key": "api"}},
    }


def test_an_uncovered_repository_is_unmatched_and_names_the_group_that_offers_its_labels(
    kube, gitea, cluster, team, start_operator
):
    ns, org, repo = team.ns, team.org, team.repo
    gitea.create_repo(org, "ml")
    try:
        ml = repo_tokens(kube, ns, cluster, gitea, org, "ml")
        gitea.push_workflow(org, repo, "gpu.yml", GPU)
        (job,) = gitea.wait_for_jobs(org, repo, "queued", count=1)
        operator = start_operator(ns)
        # "gpu" offers gro-gpu, for org/ml only. It reports first: were "ci" alone, the job
        # would be unmatched by its labels, and that Event is not repeated within the hour.
        team.group("gpu", scope="repo", repo="ml", labels=["gro-gpu"], **ml)
        wait_until(
            lambda: condition(group_status(kube, ns, "gpu"), "Ready").get("status") == "True",
            what="gpu Ready",
        )
        # "ci" covers the whole org, so it lists the job, but it offers gro-linux only.
        team.group("ci")

        warning = wait_until(
            lambda: next((e for e in events(kube, ns) if e["reason"] == "UnmatchedJobs"), None),
            what="an UnmatchedJobs Event",
        )
        assert warning["type"] == "Warning"
        assert warning["involvedObject"]["name"] == "ci"  # the group that observed the job
        message = warning["message"]
        assert "1 queued job(s) with runs-on [gro-gpu] match no RunnerGroup" in message
        assert f"offered by {ns}/gpu, whose scope does not cover the job's repository" in message
        assert "did you mean" not in message  # the label is right; the scope is the problem
        assert job["url"] in message
        wait_until(
            lambda: metric(operator.health_port, "gitea_runner_operator_unmatched_jobs",
                           labels="gro-gpu") == 1,
            what="unmatched_jobs{labels=gro-gpu} 1",
        )  # fmt: skip
        for name in ("ci", "gpu"):  # neither counts it as its own demand
            assert group_status(kube, ns, name).get("queuedJobs") == 0

        out = why(cluster, ns, job["url"])
        unmatched = series(operator.health_port, "gitea_runner_operator_unmatched_jobs")
        show("uncovered repository", job["url"], out, event=message, metric=unmatched)
        assert f"in {org}/{repo}: queued, runs-on [gro-gpu]" in out
        assert "Could serve it: none" in out
        assert f"  {ns}/gpu: its scope (repo {org}/ml) does not cover {org}/{repo}\n" in out
        assert f"  {ns}/ci: it does not offer 'gro-gpu'" in out
        assert "(it offers" not in out  # no typo hint for a label that is no typo
        assert (
            f"Verdict: unmatched: {ns}/gpu offer(s) runs-on [gro-gpu] but no group's scope "
            "covers its repository"
        ) in out
    finally:
        gitea.delete(f"/repos/{org}/ml")


def test_a_quota_refused_group_holds_its_job_back_and_says_why(
    kube, gitea, cluster, team, start_operator
):
    ns, org, repo = team.ns, team.org, team.repo
    quota(kube, ns, {"count/jobs.batch": "0"})
    gitea.push_workflow(org, repo, "one.yml", ONE)
    (job,) = gitea.wait_for_jobs(org, repo, "queued", count=1)
    operator = start_operator(ns)
    team.group("ci")

    status = wait_until(
        lambda: (s := group_status(kube, ns, "ci")).get("waiting", {}).get("heldBack", {})
        .get("count") == 1 and s,
        what="status.waiting.heldBack.count == 1",
    )  # fmt: skip
    waiting = status["waiting"]
    assert waiting["heldBack"] == {
        "count": 1,
        "reason": "JobCreateRefused",
        "condition": "RunnersHealthy",
    }
    assert (waiting["startingRunner"], waiting["atCapacity"]) == (0, 0)
    healthy = condition(status, "RunnersHealthy")
    assert (healthy["status"], healthy["reason"]) == ("False", "JobCreateRefused")
    assert "exceeded quota" in healthy["message"]
    assert any(e["reason"] == "JobCreateRefused" and e["involvedObject"]["name"] == "ci"
               for e in events(kube, ns))  # fmt: skip
    assert runner_jobs(kube, ns, "ci") == []
    wait_until(
        lambda: metric(operator.health_port, "gitea_runner_operator_waiting_jobs",
                       namespace=ns, runnergroup="ci", reason="held_back") == 1,
        what="waiting_jobs{reason=held_back} 1",
    )  # fmt: skip

    out = why(cluster, ns, job["url"])
    held = series(operator.health_port, "gitea_runner_operator_waiting_jobs")
    show("quota-refused group", job["url"], out, waiting=waiting, metric=held)
    assert "Could serve it: " + f"{ns}/ci\n" in out
    assert f"Should serve it: {ns}/ci" in out
    assert f"  {ns}/ci: RunnersHealthy=False, JobCreateRefused: " in out
    assert "exceeded quota" in out
    assert f"  {ns}/ci: 1 job(s) held back (RunnersHealthy JobCreateRefused)" in out
    assert f"Verdict: {ns}/ci should serve it; it is held back (see above)" in out


def test_runner_pods_that_never_start_are_a_starting_runner_then_runner_pods_not_starting(
    kube, gitea, cluster, team, start_operator
):
    """The runner Job is created, but the namespace's quota admits no Pod: the job waits for
    a runner that never starts. At first that is a starting runner like any other; once the
    Job has had no Pod for a minute (scaling.NO_POD_GRACE), RunnersHealthy says so."""
    ns, org, repo = team.ns, team.org, team.repo
    quota(kube, ns, {"pods": "0"})
    gitea.push_workflow(org, repo, "one.yml", ONE)
    (job,) = gitea.wait_for_jobs(org, repo, "queued", count=1)
    operator = start_operator(ns)
    team.group("ci")

    status = wait_until(
        lambda: (s := group_status(kube, ns, "ci")).get("waiting", {}).get("startingRunner") == 1
        and s,
        what="status.waiting.startingRunner == 1",
    )  # fmt: skip
    assert (status["waiting"]["atCapacity"], status["waiting"]["heldBack"]["count"]) == (0, 0)
    (runner,) = runner_jobs(kube, ns, "ci")
    assert kube.get(f"/api/v1/namespaces/{ns}/pods")["items"] == []
    wait_until(
        lambda: metric(operator.health_port, "gitea_runner_operator_waiting_jobs",
                       namespace=ns, runnergroup="ci", reason="starting_runner") == 1,
        what="waiting_jobs{reason=starting_runner} 1",
    )  # fmt: skip
    early = why(cluster, ns, job["url"])
    assert f"Should serve it: {ns}/ci" in early
    assert "Holding it back" not in early  # a runner on its way holds nothing back
    assert (
        f"On its way:\n  {ns}/ci: 1 runner(s) starting or idle for its queued jobs; if they "
        "stay so, see kubectl get pods and the RunnersHealthy condition"
    ) in early

    healthy = wait_until(
        lambda: (c := condition(group_status(kube, ns, "ci"), "RunnersHealthy"))
        .get("reason") == "RunnerPodsNotStarting" and c,
        timeout=100,
        what="RunnersHealthy RunnerPodsNotStarting",
    )  # fmt: skip
    name = runner["metadata"]["name"]
    assert healthy["status"] == "False"
    assert f"Job {name}: no Pod was created" in healthy["message"]
    assert any(e["reason"] == "RunnerPodsNotStarting" and e["involvedObject"]["name"] == "ci"
               for e in events(kube, ns))  # fmt: skip
    assert [j["metadata"]["name"] for j in runner_jobs(kube, ns, "ci")] == [name]  # no churn

    out = why(cluster, ns, job["url"])
    show("runner Pods never start", job["url"], out, early=early)
    assert f"  {ns}/ci: RunnersHealthy=False, RunnerPodsNotStarting: 1 runner Pod(s) cannot " in out
    assert f"Job {name}: no Pod was created" in out
    assert f"Verdict: {ns}/ci should serve it; it is held back (see above)" in out


def test_a_job_served_by_a_peer_names_the_peer_in_status_metrics_and_why(
    kube, gitea, cluster, team, start_operator, kwok
):
    ns, org, repo = team.ns, team.org, team.repo
    app = repo_tokens(kube, ns, cluster, gitea, org, repo)
    gitea.push_workflow(org, repo, "one.yml", ONE)
    (job,) = gitea.wait_for_jobs(org, repo, "queued", count=1)
    operator = start_operator(ns)
    # kwok keeps the runner Pods running, unregistered: the job stays queued.
    team.group("app-ci", scope="repo", repo=repo, image=kwok_image(600), **app)
    wait_until(
        lambda: group_status(kube, ns, "app-ci").get("waiting", {}).get("startingRunner") == 1,
        what="app-ci: status.waiting.startingRunner == 1",
    )
    team.group("org-ci", image=kwok_image(600))

    status = wait_until(
        lambda: (s := group_status(kube, ns, "org-ci")).get("waiting", {}).get("servedByPeer", {})
        .get("count") == 1 and s,
        what="org-ci: status.waiting.servedByPeer.count == 1",
    )  # fmt: skip
    waiting = status["waiting"]
    assert waiting["servedByPeer"] == {"count": 1, "groups": [f"{ns}/app-ci"]}
    assert (waiting["startingRunner"], waiting["atCapacity"]) == (0, 0)
    assert waiting["heldBack"]["count"] == 0
    assert status["oldestQueuedTime"].endswith("Z")  # it still sees the job waiting
    assert max(sample(6, lambda: len(runner_jobs(kube, ns, "org-ci")))) == 0  # no second runner
    assert len(runner_jobs(kube, ns, "app-ci")) == 1
    wait_until(
        lambda: metric(operator.health_port, "gitea_runner_operator_waiting_jobs",
                       namespace=ns, runnergroup="org-ci", reason="served_by_peer") == 1,
        what="waiting_jobs{runnergroup=org-ci,reason=served_by_peer} 1",
    )  # fmt: skip
    assert metric(operator.health_port, "gitea_runner_operator_waiting_jobs",
                  namespace=ns, runnergroup="app-ci", reason="starting_runner") == 1  # fmt: skip

    out = why(cluster, ns, job["url"])
    served = series(operator.health_port, "gitea_runner_operator_waiting_jobs")
    show("served by a peer", job["url"], out, waiting=waiting, metric=served,
         get_rg=get_rg(cluster, ns))  # fmt: skip
    assert f"Could serve it: {ns}/app-ci, {ns}/org-ci\n" in out
    assert f"Should serve it: {ns}/app-ci (the most specific scope, then spare capacity)" in out
    assert "Cannot serve it:" not in out
    assert f"  {ns}/app-ci: 1 runner(s) starting or idle for its queued jobs" in out
    assert f"Verdict: {ns}/app-ci should serve it" in out
