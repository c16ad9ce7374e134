"""Fair claims on the testbed: a group that cannot create (its namespace's quota refuses
every Job) must not hold the jobs a healthy group with the same labels could run. Before,
the blocked group, having more spare capacity, was the first choice for every job and the
healthy one started nothing for as long as the other stayed broken."""

from __future__ import annotations

import pytest

from tests.support import manifests
from tests.support.builders import workflow
from tests.support.testbed import (
    allow_secrets,
    condition,
    delete_namespace,
    group_status,
    kwok_image,
    make_namespace,
    make_tokens,
    runner_group,
    runner_jobs,
    sample,
    unique,
    wait_until,
)

pytestmark = pytest.mark.integration

FOUR = workflow("fair", {f"j{i}": "gro-linux" for i in range(4)})


def test_a_quota_blocked_group_leaves_every_job_to_a_healthy_one(
    kube, gitea, cluster, team_namespace, gitea_target, start_operator, kwok
):
    healthy, org, repo = team_namespace, gitea_target.org, gitea_target.repo
    blocked = make_namespace(kube, unique("blocked"))
    try:
        allow_secrets(kube, blocked)
        for ns in (healthy, blocked):
            make_tokens(kube, ns, cluster, gitea_target)
        kube.post(
            f"/api/v1/namespaces/{blocked}/resourcequotas",
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": "no-jobs"},
                "spec": {"hard": {"count/jobs.batch": "0", "pods": "0"}},
            },
        )
        wait_until(
            lambda: (
                kube.get(f"/api/v1/namespaces/{blocked}/resourcequotas/no-jobs")
                .get("status", {})
                .get("hard")
            ),
            what="quota status",
        )
        gitea.push_workflow(org, repo, "fair.yml", FOUR)
        gitea.wait_for_jobs(org, repo, "queued", count=4)
        start_operator(healthy, blocked)
        # The blocked group is the larger one: by spare capacity alone it is everyone's
        # first choice.
        manifests.apply(
            kube,
            runner_group("team-x", target=gitea_target, url=cluster.gitea_url,
                         maxActiveRunners=50, image=kwok_image(600)),
            namespace=blocked,
        )  # fmt: skip
        wait_until(
            lambda: (
                condition(group_status(kube, blocked, "team-x"), "RunnersHealthy").get("reason")
                == "JobCreateRefused"
            ),
            what="team-x refused by its quota",
        )
        manifests.apply(
            kube,
            runner_group("team-y", target=gitea_target, url=cluster.gitea_url,
                         maxActiveRunners=10, image=kwok_image(600)),
            namespace=healthy,
        )  # fmt: skip
        wait_until(
            lambda: len(runner_jobs(kube, healthy, "team-y")) == 4,
            timeout=60,
            what="four runner Jobs for the healthy group",
        )
        seen = sample(12, lambda: len(runner_jobs(kube, healthy, "team-y")))
        print(f"\n[fair-claims] healthy runner Jobs over 12s: min={min(seen)} max={max(seen)}")
        assert min(seen) == 4 and max(seen) == 4  # every job, and none twice
        assert runner_jobs(kube, blocked, "team-x") == []
    finally:
        delete_namespace(kube, blocked)
