"""Warm runners and shared Gitea queries on the testbed."""

from __future__ import annotations

import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import manifests
from tests.support.testbed import (
    allow_secrets,
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

ONE = "name: one\non: [push]\njobs:\n  j:\n    runs-on: gro-linux\n    steps: [{run: echo}]\n"


def test_warm_runners_wait_beyond_demand_and_are_replaced_by_demand(
    kube, gitea, cluster, team_namespace, gitea_target, start_operator, kwok
):
    ns, org, repo = team_namespace, gitea_target.org, gitea_target.repo
    make_tokens(kube, ns, cluster, gitea_target)
    start_operator(ns)
    manifests.apply(
        kube,
        runner_group("warm", target=gitea_target, url=cluster.gitea_url, minIdleRunners=2,
                     maxActiveRunners=5, image=kwok_image(600)),
        namespace=ns,
    )  # fmt: skip
    # Nothing queued, yet two runners wait.
    wait_until(lambda: len(runner_jobs(kube, ns, "warm")) == 2, what="two warm runners")
    assert max(sample(6, lambda: len(runner_jobs(kube, ns, "warm")))) == 2
    status = wait_until(
        lambda: (s := group_status(kube, ns, "warm")).get("runners", {}).get("starting") == 2 and s,
        what="status: 2 starting",
    )
    assert status["queuedJobs"] == 0
    # A job is queued: the warm pool still holds two beyond it.
    gitea.push_workflow(org, repo, "one.yml", ONE)
    gitea.wait_for_jobs(org, repo, "queued", count=1)
    wait_until(lambda: len(runner_jobs(kube, ns, "warm")) == 3, what="three runners")
    assert max(sample(6, lambda: len(runner_jobs(kube, ns, "warm")))) == 3


def _jobs_requests(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "gitea_runner_operator_gitea_requests_total"
        and s.labels.get("endpoint") == "jobs"
    )


def test_groups_on_one_scope_and_token_share_their_queries(
    kube, cluster, gitea_target, start_operator
):
    """Three groups in two namespaces, same organisation, same API token: one query per poll
    window, not three (a fourth group with another token would not share)."""
    namespaces = [unique("share"), unique("share")]
    try:
        for ns in namespaces:
            make_namespace(kube, ns)
            allow_secrets(kube, ns)
            make_tokens(kube, ns, cluster, gitea_target)
        operator = start_operator(*namespaces)
        for i, ns in enumerate([namespaces[0], namespaces[0], namespaces[1]]):
            manifests.apply(
                kube,
                runner_group(f"s{i}", target=gitea_target, url=cluster.gitea_url,
                             labels=[f"gro-share-{i}"], pollInterval="5s"),
                namespace=ns,
            )  # fmt: skip
        for i, ns in enumerate([namespaces[0], namespaces[0], namespaces[1]]):
            wait_until(lambda ns=ns, i=i: group_status(kube, ns, f"s{i}").get("lastCheckTime"),
                       what="first check")  # fmt: skip
        before, t0 = _jobs_requests(operator.health_port), time.monotonic()
        time.sleep(30)
        requests = _jobs_requests(operator.health_port) - before
        polls = (time.monotonic() - t0) / 5
        print(
            f"\n[sharing] 3 groups, {polls:.0f} poll intervals: {requests:.0f} queued-job queries"
        )
        # Unshared, three groups would send about 3 per interval (18 in 30 s).
        assert requests <= polls + 3, requests
    finally:
        for ns in namespaces:
            delete_namespace(kube, ns)
