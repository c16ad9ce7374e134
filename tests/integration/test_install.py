"""`kubectl apply -k manifests/` on a real API server: every object is valid, and the
operator's Pod passes the `restricted` Pod Security level its namespace enforces."""

from __future__ import annotations

import pytest

from tests.support import manifests
from tests.support.testbed import wait_until
from tests.testbed.kube import KubeError

pytestmark = pytest.mark.integration


def test_the_install_kustomization_applies_and_the_deployment_becomes_available(kube, kwok):
    objects = manifests.kustomization()
    kinds = [o["kind"] for o in objects]
    assert kinds.count("Deployment") == 1 and "CustomResourceDefinition" in kinds
    for obj in objects:
        manifests.apply(kube, obj)
    ns = "gitea-runner-operator"
    path = f"/apis/apps/v1/namespaces/{ns}/deployments/gitea-runner-operator"
    # kwok plays the kubelet, so "available" proves admission (Pod Security "restricted"),
    # scheduling and the probes' shape, not the image.
    deployment = wait_until(
        lambda: (d := kube.get(path)).get("status", {}).get("availableReplicas") == 1 and d,
        timeout=90,
        what="operator Deployment available",
    )
    pod_spec = deployment["spec"]["template"]["spec"]
    assert pod_spec["securityContext"]["runAsNonRoot"] is True
    assert pod_spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    events = kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
    assert not [e for e in events if "violates PodSecurity" in e.get("message", "")]
    kube.patch(path, {"spec": {"replicas": 0}})  # leave no fake operator Pod behind

    # And the namespace really enforces it: a privileged Pod is refused there.
    with pytest.raises(KubeError) as refused:
        kube.post(
            f"/api/v1/namespaces/{ns}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "privileged"},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "x", "securityContext": {"privileged": True}}
                    ]
                },
            },
        )
    assert refused.value.status == 403
    assert "violates PodSecurity" in refused.value.body


def test_the_examples_apply(kube, cluster):
    for obj in manifests.kustomization("examples"):
        manifests.apply(kube, obj)
    group = kube.get("/apis/gitea.bpg.pw/v1alpha1/namespaces/team-a/runnergroups/ci")
    assert group["spec"]["maxActiveRunners"] == 5
    kube.delete("/api/v1/namespaces/team-a")
