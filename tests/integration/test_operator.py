"""The operator against a real API server and a real Gitea: real workflows make real queued
jobs; kwok plays the kubelet and completes runner Pods after a delay chosen by the test."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support import manifests
from tests.support.testbed import (
    group_status,
    job_done,
    kwok_image,
    make_secret,
    ready,
    runner_group,
    runner_jobs,
    sample,
    unique,
    wait_until,
)

pytestmark = pytest.mark.integration

WORKFLOW = """\
name: ci
on: [push]
jobs:
  build-1:
    runs-on: gro-linux
    steps: [{run: echo one}]
  build-2:
    runs-on: gro-linux
    steps: [{run: echo two}]
  build-3:
    runs-on: gro-linux
    steps: [{run: echo three}]
  gpu:
    runs-on: gro-gpu
    steps: [{run: echo gpu}]
  after-build:
    runs-on: gro-linux
    needs: [build-1]
    steps: [{run: echo after}]
"""

BLOCKED_ONLY = """\
name: blocked
on: [push]
jobs:
  first:
    runs-on: gro-elsewhere
    steps: [{run: echo first}]
  second:
    runs-on: gro-linux
    needs: [first]
    steps: [{run: echo second}]
"""


def test_runner_jobs_follow_the_queue_up_to_the_maximum(
    kube, gitea, cluster, team, start_operator, kwok
):
    ns, org, repo = team.ns, team.org, team.repo
    gitea.push_workflow(org, repo, "ci.yml", WORKFLOW)
    gitea.wait_for_jobs(org, repo, "queued", count=4)  # 3 x gro-linux, 1 x gro-gpu
    gitea.wait_for_jobs(org, repo, "waiting", count=1)  # after-build, blocked by needs:
    start_operator(ns)

    team.group("ci", image=kwok_image(25))

    # Runners for the queued jobs the group can run, never more than maxActiveRunners (2).
    wait_until(lambda: len(runner_jobs(kube, ns, "ci")) == 2, what="two runner Jobs")
    counts = sample(12, lambda: len(runner_jobs(kube, ns, "ci")))
    assert max(counts) == 2, counts

    status = wait_until(
        lambda: (
            (s := group_status(kube, ns, "ci")).get("activeRunners") == 2
            and s.get("queuedJobs") == 3
            and s
        ),
        what="status 2 active / 3 queued",
    )
    assert (ready(status)["status"], ready(status)["reason"]) == ("True", "AtCapacity")
    assert status["observedGeneration"] == 1
    assert status["target"] == org
    assert status["lastCheckTime"].endswith("Z")

    # Each Job is the runner Job users were promised, with no token in it.
    group_uid = kube.get(f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups/ci")[
        "metadata"
    ]["uid"]
    for job in runner_jobs(kube, ns, "ci"):
        text = json.dumps(job)
        assert team.target.registration_token not in text
        assert cluster.gitea_token not in text
        (owner,) = job["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == (
            "RunnerGroup",
            group_uid,
            True,
        )
        assert job["metadata"]["name"].startswith("ci-")
        assert job["spec"]["ttlSecondsAfterFinished"] == 5
        pod = job["spec"]["template"]["spec"]
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        assert "GITEA_RUNNER_REGISTRATION_TOKEN" not in env  # issue 34: gro-register alone
        (register,) = [c for c in pod["initContainers"] if c["name"] == "gro-register"]
        register_env = {e["name"]: e for e in register["env"]}
        assert register_env["GITEA_RUNNER_REGISTRATION_TOKEN"]["valueFrom"]["secretKeyRef"] == {
            "name": "tokens",
            "key": "registration",
        }

    # Empty the queue. Gitea's API cannot cancel a run, so delete the repository (its runs
    # and jobs go with it); the organisation, the group's scope, stays.
    first_jobs = {j["metadata"]["name"] for j in runner_jobs(kube, ns, "ci")}
    gitea.delete(f"/repos/{org}/{repo}")
    wait_until(lambda: group_status(kube, ns, "ci").get("queuedJobs") == 0, what="queue empty")

    # kwok completes the runner Pods; the Jobs finish and nothing replaces them.
    wait_until(
        lambda: all(job_done(j) for j in runner_jobs(kube, ns, "ci")), timeout=90, what="Jobs done"
    )
    wait_until(lambda: group_status(kube, ns, "ci").get("activeRunners") == 0, what="0 active")
    later = sample(12, lambda: {j["metadata"]["name"] for j in runner_jobs(kube, ns, "ci")})
    assert all(names <= first_jobs for names in later), later

    # The Jobs' TTL (5 s here, 600 s by default) lets the TTL controller remove them.
    wait_until(lambda: runner_jobs(kube, ns, "ci") == [], timeout=90, what="TTL clean-up")
    status = group_status(kube, ns, "ci")
    assert (status["activeRunners"], status["queuedJobs"]) == (0, 0)
    assert ready(status)["status"] == "True"


def test_blocked_jobs_and_foreign_labels_start_no_runner(
    kube, gitea, cluster, team, start_operator
):
    ns, org, repo = team.ns, team.org, team.repo
    gitea.push_workflow(org, repo, "blocked.yml", BLOCKED_ONLY)
    gitea.wait_for_jobs(org, repo, "queued", count=1)  # "first": a label the group lacks
    gitea.wait_for_jobs(org, repo, "waiting", count=1)  # "second": ours, but blocked
    start_operator(ns)
    team.group("idle")
    status = wait_until(
        lambda: (s := group_status(kube, ns, "idle")).get("lastCheckTime") and s,
        what="first check",
    )
    assert status["queuedJobs"] == 0
    assert ready(status)["reason"] == "Polling"
    assert max(sample(12, lambda: len(runner_jobs(kube, ns, "idle")))) == 0


def test_spec_changes_take_effect_and_deleting_the_group_deletes_its_jobs(
    kube, gitea, cluster, team, start_operator
):
    ns, org, repo = team.ns, team.org, team.repo
    gitea.push_workflow(org, repo, "ci.yml", WORKFLOW)
    gitea.wait_for_jobs(org, repo, "queued", count=4)
    start_operator(ns)
    group = team.group("grow", maxActiveRunners=1, image=kwok_image(120))
    wait_until(lambda: len(runner_jobs(kube, ns, "grow")) == 1, what="one runner Job")

    group["spec"]["maxActiveRunners"] = 5
    group["spec"]["labels"] = ["gro-linux", "gro-gpu"]
    manifests.apply(kube, group, namespace=ns)
    # 3 gro-linux + 1 gro-gpu now match; the maximum allows all four.
    wait_until(lambda: len(runner_jobs(kube, ns, "grow")) == 4, what="four runner Jobs")
    status = wait_until(
        lambda: (s := group_status(kube, ns, "grow")).get("observedGeneration") == 2 and s,
        what="generation 2 observed",
    )
    assert status["queuedJobs"] == 4
    assert max(sample(8, lambda: len(runner_jobs(kube, ns, "grow")))) == 4

    kube.delete(f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups/grow")
    wait_until(lambda: runner_jobs(kube, ns, "grow") == [], timeout=60, what="garbage collection")


def test_a_restarted_operator_does_not_double_the_runners(
    kube, gitea, cluster, team, start_operator
):
    ns, org, repo = team.ns, team.org, team.repo
    gitea.push_workflow(org, repo, "ci.yml", WORKFLOW)
    gitea.wait_for_jobs(org, repo, "queued", count=4)
    first = start_operator(ns)
    team.group("steady", maxActiveRunners=5, image=kwok_image(120))
    wait_until(lambda: len(runner_jobs(kube, ns, "steady")) == 3, what="three runner Jobs")
    assert first.stop() == 0
    # A new process, with no memory of the first, and a second one racing it for the Lease.
    start_operator(ns)
    start_operator(ns)
    assert max(sample(15, lambda: len(runner_jobs(kube, ns, "steady")))) == 3


def _condition_for(kube, ns, name) -> dict[str, Any]:
    return wait_until(
        lambda: (c := ready(group_status(kube, ns, name))) and c.get("status") == "False" and c,
        what=f"{name} not ready",
    )


def test_problems_become_conditions_naming_the_cause(
    kube, cluster, team_namespace, gitea_target, start_operator
):
    ns = team_namespace
    make_secret(
        kube, ns, "tokens", {"registration": gitea_target.registration_token, "api": "wrong"}
    )
    make_secret(kube, ns, "nokey", {"registration": gitea_target.registration_token})
    start_operator(ns)
    url = cluster.gitea_url

    manifests.apply(kube, runner_group("badtoken", target=gitea_target, url=url), namespace=ns)
    cond = _condition_for(kube, ns, "badtoken")
    assert cond["reason"] == "GiteaUnauthorized"

    missing = runner_group("nosecret", target=gitea_target, url=url)
    missing["spec"]["authToken"] = {"secretRef": {"name": "absent", "key": "api"}}
    manifests.apply(kube, missing, namespace=ns)
    cond = _condition_for(kube, ns, "nosecret")
    assert cond["reason"] == "SecretNotFound"
    assert f"spec.authToken.secretRef: Secret {ns}/absent not found" in cond["message"]
    # Within its grace a missing Secret is progress (it may come a little after the group),
    # not yet Stalled: kstatus and Flux read Reconciling, and wait.
    (reconciling,) = [
        c for c in group_status(kube, ns, "nosecret")["conditions"] if c["type"] == "Reconciling"
    ]
    assert (reconciling["status"], reconciling["reason"]) == ("True", "SecretNotFound")

    nokey = runner_group("nokey", target=gitea_target, url=url)
    nokey["spec"]["authToken"] = {"secretRef": {"name": "nokey", "key": "api"}}
    manifests.apply(kube, nokey, namespace=ns)
    cond = _condition_for(kube, ns, "nokey")
    assert cond["reason"] == "SecretKeyMissing"
    assert "'api'" in cond["message"]

    nowhere = runner_group("nowhere", target=gitea_target, url="http://127.0.0.1:9")
    nowhere["spec"]["authToken"] = {"secretRef": {"name": "nokey", "key": "registration"}}
    manifests.apply(kube, nowhere, namespace=ns)
    cond = _condition_for(kube, ns, "nowhere")
    assert cond["reason"] == "GiteaUnreachable"

    ghost = runner_group("ghost", target=gitea_target, url=url)
    ghost["spec"]["org"] = "no-such-org-anywhere"
    ghost["spec"]["authToken"] = {"secretRef": {"name": "nokey", "key": "registration"}}
    make_secret(kube, ns, "admin", {"registration": "x", "api": cluster.gitea_token})
    ghost["spec"]["authToken"] = {"secretRef": {"name": "admin", "key": "api"}}
    manifests.apply(kube, ghost, namespace=ns)
    cond = _condition_for(kube, ns, "ghost")
    assert cond["reason"] == "GiteaNotFound"
    assert "no-such-org-anywhere" in cond["message"]

    for name in ("badtoken", "nosecret", "nokey", "nowhere", "ghost"):
        assert runner_jobs(kube, ns, name) == []
    events = kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
    reasons = {e["reason"] for e in events if e["involvedObject"]["kind"] == "RunnerGroup"}
    assert {"GiteaUnauthorized", "SecretNotFound", "SecretKeyMissing"} <= reasons


@pytest.mark.parametrize("scope", ["repo", "global"])
def test_repo_and_global_scopes_find_their_queued_jobs(
    kube, gitea, cluster, team_namespace, gitea_target, start_operator, scope
):
    ns, org, repo = team_namespace, gitea_target.org, gitea_target.repo
    label = unique(f"gro-{scope}")  # unique: a global group sees every repository's jobs
    if scope == "global":
        registration = gitea.registration_token("admin")
    else:
        registration = gitea.registration_token("repo", owner=org, repo=repo)
    make_secret(kube, ns, "tokens", {"registration": registration, "api": cluster.gitea_token})
    jobs = "".join(
        f"  j{i}:\n    runs-on: {label}\n    steps: [{{run: echo {i}}}]\n" for i in range(2)
    )
    gitea.push_workflow(org, repo, "scoped.yml", f"name: scoped\non: [push]\njobs:\n{jobs}")
    gitea.wait_for_jobs(org, repo, "queued", count=2)
    start_operator(ns)
    group = runner_group("scoped", target=gitea_target, url=cluster.gitea_url, labels=[label],
                         maxActiveRunners=5, scope=scope, image=kwok_image(120))  # fmt: skip
    if scope == "global":
        del group["spec"]["org"]
    else:
        group["spec"]["repo"] = repo
    manifests.apply(kube, group, namespace=ns)
    wait_until(lambda: len(runner_jobs(kube, ns, "scoped")) == 2, what="two runner Jobs")
    status = wait_until(
        lambda: (s := group_status(kube, ns, "scoped")).get("queuedJobs") == 2 and s,
        what="status",
    )
    assert status["target"] == ("*" if scope == "global" else f"{org}/{repo}")
    assert ready(status)["status"] == "True"
    assert max(sample(8, lambda: len(runner_jobs(kube, ns, "scoped")))) == 2
