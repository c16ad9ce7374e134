"""Runner Pods in clusters with rules: tainted CI nodes, Pod Security ``restricted``, quotas
that require limits. The operator runs as in production; kwok plays the kubelet."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import manifests
from tests.support.testbed import (
    ONE_JOB,
    GiteaTarget,
    allow_secrets,
    delete_namespace,
    kwok_image,
    make_namespace,
    make_tokens,
    namespace_with_access,
    runner_group,
    runner_jobs,
    sample,
    unique,
    wait_until,
)
from tests.testbed.kube import KubeClient

pytestmark = pytest.mark.integration


LIMITS = {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "100m", "memory": "128Mi"}}


def group_pods(kube: KubeClient, ns: str, group: str) -> list[dict[str, Any]]:
    selector = f"gitea.bpg.pw/runnergroup-name={group}"
    return kube.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=selector)["items"]


def start_group(
    kube: KubeClient, gitea: Any, cluster: Any, ns: str, target: GiteaTarget, **spec: Any
) -> None:
    """Tokens, one queued gro-linux job, and a group (the operator must already watch ns)."""
    make_tokens(kube, ns, cluster, target)
    gitea.push_workflow(target.org, target.repo, "one.yml", ONE_JOB)
    gitea.wait_for_jobs(target.org, target.repo, "queued", count=1)
    group = runner_group("pods", target=target, url=cluster.gitea_url, **spec)
    manifests.apply(kube, group, namespace=ns)


@pytest.fixture
def tainted_node(kube: KubeClient, cluster: Any) -> Iterator[str]:
    """A second kwok node, labelled and tainted as a dedicated CI pool is."""
    name = unique("kwok-ci")
    pool = f"ci-{secrets.token_hex(3)}"
    kube.post(
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "gro-testbed/kwok": "true",  # kwok manages it
                    "pool": pool,
                },
            },
            "spec": {"taints": [{"key": "pool", "value": pool, "effect": "NoSchedule"}]},
        },
    )
    wait_until(lambda: cluster.node_ready(name), what=f"node {name} Ready")
    try:
        yield name
    finally:
        kube.delete(f"/api/v1/nodes/{name}")


def test_a_template_places_runners_on_a_tainted_pool_only(
    kube, gitea, cluster, team_namespace, gitea_target, start_operator, kwok, tainted_node
):
    ns = team_namespace
    node = kube.get(f"/api/v1/nodes/{tainted_node}")
    pool = node["metadata"]["labels"]["pool"]
    template = {
        "metadata": {"labels": {"team": "a"}},
        "spec": {
            "nodeSelector": {"pool": pool},
            "tolerations": [
                {"key": "pool", "operator": "Equal", "value": pool, "effect": "NoSchedule"}
            ],
            "containers": [{"name": "runner", "resources": LIMITS}],
        },
    }
    start_operator(ns)
    start_group(
        kube, gitea, cluster, ns, gitea_target, image=kwok_image(60), template=template,
        maxActiveRunners=1,
    )  # fmt: skip
    pods = wait_until(
        lambda: [p for p in group_pods(kube, ns, "pods") if p["spec"].get("nodeName")],
        what="a scheduled runner Pod",
    )
    for pod in pods:
        assert pod["spec"]["nodeName"] == tainted_node
        assert pod["metadata"]["labels"]["team"] == "a"
        (runner,) = [c for c in pod["spec"]["containers"] if c["name"] == "runner"]
        assert runner["resources"]["limits"] == LIMITS["limits"]
    # A group without the template, for a second queued job (the first is covered: each job
    # counts for one group), gets its runner anywhere but that pool.
    gitea.push_workflow(gitea_target.org, gitea_target.repo, "second.yml", ONE_JOB)
    gitea.wait_for_jobs(gitea_target.org, gitea_target.repo, "queued", count=2)
    plain = runner_group("plain", target=gitea_target, url=cluster.gitea_url,
                         image=kwok_image(60), maxActiveRunners=1)  # fmt: skip
    manifests.apply(kube, plain, namespace=ns)
    (other, *_) = wait_until(
        lambda: [p for p in group_pods(kube, ns, "plain") if p["spec"].get("nodeName")],
        what="a scheduled runner Pod of the plain group",
    )
    assert other["spec"]["nodeName"] != tainted_node


def test_host_mode_runners_are_admitted_under_pod_security_restricted(
    kube, gitea, cluster, gitea_target, start_operator, kwok
):
    ns = namespace_with_access(
        kube, unique("restricted"), {"pod-security.kubernetes.io/enforce": "restricted"}
    )
    try:
        start_operator(ns)
        start_group(kube, gitea, cluster, ns, gitea_target, mode="host", image=kwok_image(60))
        (pod, *_) = wait_until(lambda: group_pods(kube, ns, "pods"), what="an admitted Pod")
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        env = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
        assert not {"GITEA_RUNNER_REGISTRATION_TOKEN", "GITEA_RUNNER_REGISTRATION_TOKEN_FILE"} & env
        # Registration, by the init container, is admitted under `restricted` as well.
        assert [c["name"] for c in pod["spec"]["initContainers"]] == ["gro-register"]
        # The default mode's Pod is refused there (by admission, not the operator): its daemon
        # sidecar is root of the Pod's user namespace with /proc unmasked, which `baseline`
        # admits and `restricted` does not.
        # A second queued job for it: the first is covered by the host-mode runner.
        gitea.push_workflow(gitea_target.org, gitea_target.repo, "second.yml", ONE_JOB)
        gitea.wait_for_jobs(gitea_target.org, gitea_target.repo, "queued", count=2)
        manifests.apply(
            kube,
            runner_group("dind", target=gitea_target, url=cluster.gitea_url, image=kwok_image(60)),
            namespace=ns,
        )
        wait_until(lambda: runner_jobs(kube, ns, "dind"), what="a default-mode runner Job")
        assert max(sample(6, lambda: len(group_pods(kube, ns, "dind")))) == 0
    finally:
        delete_namespace(kube, ns)


def test_a_quota_that_requires_limits_admits_templated_runner_pods(
    kube, gitea, cluster, gitea_target, start_operator, kwok
):
    ns = make_namespace(kube, unique("quota"))
    allow_secrets(kube, ns)
    try:
        kube.post(
            f"/api/v1/namespaces/{ns}/resourcequotas",
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": "ci"},
                "spec": {
                    "hard": {
                        "limits.cpu": "8",
                        "limits.memory": "16Gi",
                        "requests.cpu": "4",
                        "requests.memory": "8Gi",
                    }
                },
            },
        )
        wait_until(
            lambda: (
                kube.get(f"/api/v1/namespaces/{ns}/resourcequotas/ci").get("status", {}).get("hard")
            ),
            what="quota status",
        )
        start_operator(ns)
        # the default mode's Docker daemon is a sidecar of its own: it needs limits too, set by
        # naming it in the template (merged into the operator's), as for dind's sidecar
        template = {
            "spec": {
                "containers": [{"name": "runner", "resources": LIMITS}],
                "initContainers": [{"name": "dockerd", "resources": LIMITS}],
            }
        }
        start_group(kube, gitea, cluster, ns, gitea_target, image=kwok_image(60), template=template)
        (pod, *_) = wait_until(lambda: group_pods(kube, ns, "pods"), what="an admitted Pod")
        assert pod["spec"]["containers"][0]["resources"]["limits"] == LIMITS["limits"]
        daemon = next(c for c in pod["spec"]["initContainers"] if c["name"] == "dockerd")
        assert daemon["resources"]["limits"] == LIMITS["limits"]
        assert daemon["securityContext"]["procMount"] == "Unmasked"  # the operator's, kept
        quota = wait_until(
            lambda: (
                (q := kube.get(f"/api/v1/namespaces/{ns}/resourcequotas/ci")["status"])
                .get("used", {})
                .get("limits.cpu")
                not in (None, "0")
                and q
            ),
            what="quota usage",
        )
        assert quota["used"]["limits.memory"] != "0"
    finally:
        delete_namespace(kube, ns)
