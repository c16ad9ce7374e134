"""Failures reach the status and the log, in their own words: a create refused by a quota,
Pods refused by Pod Security, a missing Secret that appears later, a failing Gitea in the
log (not only in a condition)."""

from __future__ import annotations

import time

import pytest

from tests.support import manifests
from tests.support.builders import workflow
from tests.support.testbed import (
    allow_secrets,
    condition,
    delete_namespace,
    events,
    group_status,
    make_namespace,
    make_secret,
    make_tokens,
    ready,
    runner_group,
    runner_jobs,
    sample,
    unique,
    wait_until,
)

pytestmark = pytest.mark.integration

THREE = workflow("three", dict.fromkeys("abc", "gro-linux"))


def test_a_quota_refusal_is_a_condition_and_an_event_not_a_loop(
    kube, gitea, cluster, team_namespace, gitea_target, start_operator
):
    ns, org, repo = team_namespace, gitea_target.org, gitea_target.repo
    make_tokens(kube, ns, cluster, gitea_target)
    kube.post(
        f"/api/v1/namespaces/{ns}/resourcequotas",
        {"metadata": {"name": "one-job"}, "spec": {"hard": {"count/jobs.batch": "1"}}},
    )
    gitea.push_workflow(org, repo, "three.yml", THREE)
    gitea.wait_for_jobs(org, repo, "queued", count=3)
    start_operator(ns)
    manifests.apply(
        kube, runner_group("quota", target=gitea_target, url=cluster.gitea_url,
                           maxActiveRunners=3), namespace=ns,
    )  # fmt: skip
    healthy = wait_until(
        lambda: (
            (c := condition(group_status(kube, ns, "quota"), "RunnersHealthy"))
            and c.get("reason") == "JobCreateRefused"
            and c
        ),
        what="JobCreateRefused",
    )
    assert "exceeded quota" in healthy["message"]
    assert any(e["reason"] == "JobCreateRefused" for e in events(kube, ns))
    assert max(sample(10, lambda: len(runner_jobs(kube, ns, "quota")))) == 1


def test_pods_refused_by_pod_security_are_reported_and_not_multiplied(
    kube, gitea, cluster, gitea_target, start_operator
):
    """The default mode's runner Pod is beyond `restricted` (its daemon sidecar is root of the
    Pod's user namespace, /proc unmasked); a namespace enforcing it refuses it, so the Job
    never gets a Pod. Measured before: such groups recreated runner Jobs every idleTimeout
    with Ready=True and nothing saying why."""
    org, repo = gitea_target.org, gitea_target.repo
    ns = make_namespace(kube, unique("restricted"), privileged=False)
    try:
        kube.patch(
            f"/api/v1/namespaces/{ns}",
            {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
        )
        allow_secrets(kube, ns)
        make_tokens(kube, ns, cluster, gitea_target)
        gitea.push_workflow(org, repo, "three.yml", THREE)
        gitea.wait_for_jobs(org, repo, "queued", count=3)
        start_operator(ns)
        manifests.apply(
            kube, runner_group("denied", target=gitea_target, url=cluster.gitea_url,
                               maxActiveRunners=5), namespace=ns,
        )  # fmt: skip
        healthy = wait_until(
            lambda: (
                (c := condition(group_status(kube, ns, "denied"), "RunnersHealthy"))
                and c.get("status") == "False"
                and c
            ),
            timeout=120,
            what="RunnersHealthy False",
        )
        assert healthy["reason"] == "RunnerPodsNotStarting"
        assert "no Pod was created" in healthy["message"]
        assert max(sample(10, lambda: len(runner_jobs(kube, ns, "denied")))) == 3
    finally:
        delete_namespace(kube, ns)


def test_a_secret_created_late_takes_effect_within_seconds(
    kube, cluster, team_namespace, gitea_target, start_operator
):
    """Measured before: the group became Ready 61 s after the Secret appeared."""
    ns = team_namespace
    start_operator(ns)
    manifests.apply(
        kube, runner_group("late", target=gitea_target, url=cluster.gitea_url), namespace=ns
    )
    wait_until(
        lambda: ready(group_status(kube, ns, "late")).get("reason") == "SecretNotFound",
        what="SecretNotFound",
    )
    time.sleep(20)  # let any backoff grow, as it did before
    make_tokens(kube, ns, cluster, gitea_target)
    created = time.monotonic()
    wait_until(
        lambda: ready(group_status(kube, ns, "late")).get("status") == "True",
        timeout=20,
        what="Ready soon after the Secret appeared",
    )
    print(f"\n[signals] secret created -> Ready after {time.monotonic() - created:.1f}s")


def test_failures_are_in_the_log_with_group_and_reason(
    kube, cluster, team_namespace, gitea_target, start_operator
):
    ns = team_namespace
    make_secret(kube, ns, "tokens", {"registration": gitea_target.registration_token,
                                     "api": "wrong"})  # fmt: skip
    operator = start_operator(ns)
    manifests.apply(
        kube, runner_group("noisy", target=gitea_target, url=cluster.gitea_url), namespace=ns
    )
    wait_until(
        lambda: ready(group_status(kube, ns, "noisy")).get("reason") == "GiteaUnauthorized",
        what="GiteaUnauthorized",
    )
    sample(12, lambda: None)  # a few polls
    warnings = [
        e
        for e in operator.log_events()
        if e.get("level") == "warning" and e.get("group") == f"{ns}/noisy"
    ]
    assert warnings and warnings[0]["reason"] == "GiteaUnauthorized"
    assert "wrong" not in operator.log()  # never the token
    assert len(warnings) == 1  # once, not once per poll
