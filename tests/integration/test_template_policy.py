"""The template policy on the real testbed: with a job queued, a group whose template asks
for the node (hostPath), or hands runner Pods a Secret that never opted in, gets a condition
naming the field and no runner Job; a group in the operator's own namespace is refused; the
platform's --template-policy can allow what it chooses."""

from __future__ import annotations

import pytest

from tests.support import manifests
from tests.support.testbed import (
    group_status,
    kwok_image,
    make_secret,
    make_tokens,
    ready,
    runner_group,
    runner_jobs,
    sample,
    wait_until,
)

pytestmark = pytest.mark.integration

WORKFLOW = "name: p\non: [push]\njobs:\n  j:\n    runs-on: gro-linux\n    steps: [{run: echo}]\n"
HOST_PATH = {"spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}
SECRET_ENV = {
    "spec": {"containers": [{"name": "runner", "envFrom": [{"secretRef": {"name": "theirs"}}]}]}
}


def refused(kube, ns: str, name: str, reason: str) -> dict:
    return wait_until(
        lambda: (c := ready(group_status(kube, ns, name))).get("reason") == reason and c,
        timeout=60,
        what=reason,
    )


def test_a_refused_template_creates_no_job_and_names_the_field(
    kube, gitea, cluster, team_namespace, gitea_target, start_operator
):
    ns, org, repo = team_namespace, gitea_target.org, gitea_target.repo
    make_tokens(kube, ns, cluster, gitea_target)
    make_secret(kube, ns, "theirs", {"password": "x"}, labels={})  # never opted in
    gitea.push_workflow(org, repo, "p.yml", WORKFLOW)
    gitea.wait_for_jobs(org, repo, "queued", count=1)
    start_operator(ns)
    for name, template in (("host-path", HOST_PATH), ("secret-env", SECRET_ENV)):
        manifests.apply(
            kube,
            runner_group(name, target=gitea_target, url=cluster.gitea_url,
                         image=kwok_image(600), template=template),
            namespace=ns,
        )  # fmt: skip
    cond = refused(kube, ns, "host-path", "TemplateNotAllowed")
    assert cond["message"].startswith("spec.template.spec.volumes[0].hostPath")
    # Stalled at once, in Ready's words, for the generation applied: GitOps tools fail fast.
    group = kube.get(f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups/host-path")
    (stalled,) = [c for c in group["status"]["conditions"] if c["type"] == "Stalled"]
    assert (stalled["status"], stalled["reason"]) == ("True", "TemplateNotAllowed")
    assert stalled["message"] == cond["message"]
    assert stalled["observedGeneration"] == group["metadata"]["generation"]
    assert group["status"]["observedGeneration"] == group["metadata"]["generation"]
    cond = refused(kube, ns, "secret-env", "TemplateNotAllowed")
    assert "spec.template.spec.containers[0].envFrom[0].secretRef" in cond["message"]
    assert "theirs" in cond["message"]
    # A job is queued that both could run: neither creates a runner Job.
    assert max(sample(8, lambda: len(runner_jobs(kube, ns, "host-path")))) == 0
    assert runner_jobs(kube, ns, "secret-env") == []


def test_the_platform_may_allow_what_it_chooses(
    kube, gitea, cluster, team_namespace, gitea_target, start_operator
):
    ns, org, repo = team_namespace, gitea_target.org, gitea_target.repo
    make_tokens(kube, ns, cluster, gitea_target)
    gitea.push_workflow(org, repo, "p.yml", WORKFLOW)
    gitea.wait_for_jobs(org, repo, "queued", count=1)
    start_operator(ns, extra=("--template-policy", "hostPath"))
    manifests.apply(
        kube,
        runner_group("allowed", target=gitea_target, url=cluster.gitea_url,
                     image=kwok_image(600), template=HOST_PATH),
        namespace=ns,
    )  # fmt: skip
    wait_until(lambda: runner_jobs(kube, ns, "allowed"), what="a runner Job")


def test_a_group_in_the_operators_own_namespace_is_refused(
    kube, cluster, team_namespace, gitea_target, start_operator
):
    ns = team_namespace
    make_tokens(kube, ns, cluster, gitea_target)
    start_operator(ns, env={"POD_NAMESPACE": ns})  # as if the operator ran here
    manifests.apply(
        kube, runner_group("inside", target=gitea_target, url=cluster.gitea_url), namespace=ns
    )
    cond = refused(kube, ns, "inside", "NamespaceNotAllowed")
    assert ns in cond["message"]
