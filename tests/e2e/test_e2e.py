"""End to end with a real runner process: the Job the operator writes is started by the
testbed's kubelet harness exactly as a kubelet would (env from the Pod spec, the
registration token from the Secret by secretKeyRef, the Pod's name as runner name), the
runner registers as ephemeral, takes a real workflow job from Gitea, runs it, reports
success, and is gone from Gitea afterwards; the runner Job completes and is not replaced."""

from __future__ import annotations

import json

import pytest

from tests.support import manifests
from tests.support.testbed import (
    group_status,
    job_done,
    make_tokens,
    runner_group,
    runner_jobs,
    sample,
    wait_until,
)

pytestmark = pytest.mark.e2e

WORKFLOW = """\
name: e2e
on: [push]
jobs:
  hello:
    runs-on: gro-e2e
    steps:
      - run: echo "hello from $(hostname)" && test -n "$GITHUB_SHA" && sleep 8
  world:
    runs-on: gro-e2e
    needs: [hello]
    steps:
      - run: echo "world, after hello"
"""


def test_runner_jobs_run_real_workflow_jobs_to_success(
    kube, gitea, cluster, team_namespace, gitea_target, start_operator, kubelet_harness
):
    ns, org, repo = team_namespace, gitea_target.org, gitea_target.repo
    make_tokens(kube, ns, cluster, gitea_target)
    start_operator(ns)
    manifests.apply(
        kube,
        runner_group("e2e", target=gitea_target, url=cluster.gitea_url, labels=["gro-e2e"],
                     maxActiveRunners=3),
        namespace=ns,
    )  # fmt: skip
    gitea.push_workflow(org, repo, "e2e.yml", WORKFLOW)

    # Both jobs run, one after the other (the second is blocked by needs: until the first
    # succeeds), each on its own ephemeral runner.
    def conclusions():
        jobs = gitea.list_jobs("repo", org, repo, status=None)
        return {j["name"]: (j["status"], j.get("conclusion")) for j in jobs}

    done = wait_until(
        lambda: (
            (c := conclusions())
            and all(s == "completed" for s, _ in c.values())
            and len(c) == 2
            and c
        ),
        timeout=180,
        what="both workflow jobs completed",
    )
    assert done == {"hello": ("completed", "success"), "world": ("completed", "success")}, (
        done, kubelet_harness.errors,
    )  # fmt: skip

    # One runner Job per workflow job; each ran its one job and finished.
    wait_until(
        lambda: (jobs := runner_jobs(kube, ns, "e2e")) and all(job_done(j) for j in jobs) and jobs,
        timeout=60,
        what="runner Jobs complete",
    )
    jobs = runner_jobs(kube, ns, "e2e")
    assert len(jobs) == 2, [j["metadata"]["name"] for j in jobs]
    assert all(j["status"].get("succeeded") == 1 for j in jobs)
    # The runner registered under its Pod's name, so the operator could see it busy during
    # the 8 s job and record that in the cluster.
    assert any(
        j["metadata"].get("annotations", {}).get("gitea.bpg.pw/took-job") == "true" for j in jobs
    )

    # Ephemeral runners leave no registration behind.
    runner_names = {r["name"] for r in gitea.list_runners("org", owner=org)}
    pod_names = {p.name for p in kubelet_harness.pods.values()}
    assert len(pod_names) == 2
    assert all(name.startswith("e2e-") for name in pod_names)
    assert not runner_names & pod_names, runner_names

    # The queue is empty: the status says so, and no further runner is started.
    wait_until(
        lambda: (
            (s := group_status(kube, ns, "e2e")).get("queuedJobs") == 0
            and s.get("activeRunners") == 0
        ),
        what="status idle",
    )
    assert max(sample(10, lambda: len(runner_jobs(kube, ns, "e2e")))) <= 2
    assert kubelet_harness.errors == []


HOST_WORKFLOW = """\
name: host
on: [push]
jobs:
  host:
    runs-on: gro-host
    steps:
      - run: test "$GRO_FROM_TEMPLATE" = "set-by-the-template"
      - run: test -z "${GITEA_RUNNER_REGISTRATION_TOKEN:-}${GITEA_RUNNER_REGISTRATION_TOKEN_FILE:-}"
"""


def test_a_host_mode_runner_runs_a_workflow_with_the_templates_env(
    kube, gitea, cluster, team_namespace, gitea_target, start_operator, kubelet_harness
):
    """Host mode through the harness: the steps see the template's env, not the token."""
    ns, org, repo = team_namespace, gitea_target.org, gitea_target.repo
    make_tokens(kube, ns, cluster, gitea_target)
    start_operator(ns)
    template = {
        "spec": {
            "containers": [
                {
                    "name": "runner",
                    "env": [{"name": "GRO_FROM_TEMPLATE", "value": "set-by-the-template"}],
                }
            ]
        }
    }
    manifests.apply(
        kube,
        runner_group("host", target=gitea_target, url=cluster.gitea_url, labels=["gro-host"],
                     mode="host", template=template),
        namespace=ns,
    )  # fmt: skip
    gitea.push_workflow(org, repo, "host.yml", HOST_WORKFLOW)

    def conclusion():
        jobs = gitea.list_jobs("repo", org, repo, status=None)
        return [(j["status"], j.get("conclusion")) for j in jobs]

    done = wait_until(
        lambda: (c := conclusion()) and all(s == "completed" for s, _ in c) and c,
        timeout=180,
        what="the host-mode job completed",
    )
    assert done == [("completed", "success")], (done, kubelet_harness.errors)
    (job, *_) = runner_jobs(kube, ns, "host")
    pod = job["spec"]["template"]["spec"]
    # The runner registered from its init container; the runner container (where the steps
    # ran) references the registration token Secret nowhere, neither by env nor by volume.
    (register,) = pod["initContainers"]
    assert register["name"] == "gro-register"
    token_secret = register["env"][-1]["valueFrom"]["secretKeyRef"]["name"]
    assert token_secret not in json.dumps(pod["containers"])
    assert token_secret not in json.dumps(pod["volumes"])
    assert kubelet_harness.errors == []
