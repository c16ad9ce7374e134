"""Clean lifecycle: runners that never take a job do not hold a slot forever, and runner
registrations whose Pod is gone do not pile up in Gitea."""

from __future__ import annotations

import subprocess

import pytest

from tests.integration import manifests
from tests.integration.conftest import (
    group_status,
    kwok_image,
    make_tokens,
    register_runner,
    runner_group,
    runner_jobs,
    wait_until,
)
from tests.testbed.kubelet_harness import runner_binary

pytestmark = pytest.mark.integration

WORKFLOW = """\
name: slow
on: [push]
jobs:
  build:
    runs-on: gro-linux
    steps: [{run: echo build}]
"""


def test_a_runner_that_never_takes_a_job_is_reaped_after_the_idle_timeout(
    kube, gitea, cluster, team_namespace, gitea_target, start_operator
):
    ns, org, repo = team_namespace, gitea_target.org, gitea_target.repo
    make_tokens(kube, ns, cluster, gitea_target)
    gitea.push_workflow(org, repo, "slow.yml", WORKFLOW)
    gitea.wait_for_jobs(org, repo, "queued", count=1)
    start_operator(ns)
    # kwok runs the Pod for an hour but no runner ever registers: it is stuck "starting".
    manifests.apply(
        kube,
        runner_group("stuck", target=gitea_target, url=cluster.gitea_url, maxActiveRunners=1,
                     idleTimeout="1m", image=kwok_image(3600)),
        namespace=ns,
    )  # fmt: skip
    first = wait_until(lambda: runner_jobs(kube, ns, "stuck"), what="a runner Job")[0]
    first_name = first["metadata"]["name"]
    # Reaped after a minute; the job is still queued, so a fresh runner takes the slot.
    replacement = wait_until(
        lambda: [j for j in runner_jobs(kube, ns, "stuck") if j["metadata"]["name"] != first_name],
        timeout=120,
        what="the idle runner replaced",
    )
    assert len(replacement) == 1
    assert first_name not in {j["metadata"]["name"] for j in runner_jobs(kube, ns, "stuck")}
    events = kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
    reaped = [e for e in events if e["reason"] == "RunnerReaped"]
    assert reaped and first_name in reaped[0]["message"]


def test_leftover_registrations_of_the_groups_runners_are_removed(
    kube, gitea, cluster, team_namespace, gitea_target, start_operator, tmp_path
):
    ns, org = team_namespace, gitea_target.org
    make_tokens(kube, ns, cluster, gitea_target)
    # A runner Pod that died before taking a job leaves an ephemeral registration named after
    # it, which Gitea keeps forever. Make one with the real registration flow.
    leftover = "tidy-abcde-fghij"
    unrelated = "someone-elses-runner"
    for name in (leftover, unrelated):
        register_runner(cluster, gitea_target, name, "gro-linux:host", tmp_path)
        (tmp_path / ".runner").unlink(missing_ok=True)
    names = {r["name"] for r in gitea.list_runners("org", owner=org)}
    assert {leftover, unrelated} <= names
    start_operator(ns)
    manifests.apply(
        kube, runner_group("tidy", target=gitea_target, url=cluster.gitea_url), namespace=ns
    )
    wait_until(
        lambda: leftover not in {r["name"] for r in gitea.list_runners("org", owner=org)},
        timeout=60,
        what="leftover registration removed",
    )
    assert unrelated in {r["name"] for r in gitea.list_runners("org", owner=org)}


def test_deleting_a_group_removes_its_runners_registrations(
    kube, gitea, cluster, team_namespace, gitea_target, start_operator, tmp_path
):
    ns, org = team_namespace, gitea_target.org
    make_tokens(kube, ns, cluster, gitea_target)
    # An idle runner of the group, online (its daemon polls Gitea) and never given a job.
    name = "bye-abcde-fghij"
    register_runner(cluster, gitea_target, name, "gro-none:host", tmp_path)
    daemon = subprocess.Popen(
        [str(runner_binary()), "daemon"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: any(
                r["name"] == name and r["status"] == "online"
                for r in gitea.list_runners("org", owner=org)
            ),
            what="idle runner online",
        )
        operator = start_operator(ns)
        manifests.apply(
            kube, runner_group("bye", target=gitea_target, url=cluster.gitea_url), namespace=ns
        )
        wait_until(lambda: group_status(kube, ns, "bye").get("lastCheckTime"), what="first check")
        assert name in {r["name"] for r in gitea.list_runners("org", owner=org)}  # online: kept

        kube.delete(f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups/bye")
        wait_until(
            lambda: name not in {r["name"] for r in gitea.list_runners("org", owner=org)},
            what="registration removed with the group",
        )
        assert any(
            e.get("event") == "removed registration of deleted group" for e in operator.log_events()
        )
    finally:
        daemon.kill()
        daemon.wait()
