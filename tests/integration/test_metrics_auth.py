"""``--metrics-auth`` against a real API server: a ServiceAccount bound to a ClusterRole that
may get the non-resource URL /metrics is let in, a valid token without it is refused, an
invented one is not authenticated; the reviews use the rights the chart grants."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from gitea_runner_operator.kube.reviews import (
    FORBIDDEN,
    OK,
    UNAUTHENTICATED,
    ApiReviewer,
    MetricsAccess,
)
from tests.support import manifests
from tests.support.testbed import unique

pytestmark = pytest.mark.integration

REVIEWS = [
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"],
     "verbs": ["create"]},
]  # fmt: skip
READER = [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


def cluster_role(kube: Any, name: str, rules: list[dict[str, Any]], ns: str, sa: str) -> None:
    rbac = "rbac.authorization.k8s.io/v1"
    manifests.apply(
        kube,
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules},
    )
    manifests.apply(
        kube,
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
        },
    )


async def test_the_api_server_lets_in_only_a_token_allowed_to_get_metrics(
    kube, cluster, team_namespace, tmp_path: Path
):
    ns = team_namespace
    for sa in ("operator", "prometheus", "stranger"):
        manifests.apply(
            kube, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}}, ns
        )
    reviews, reader = unique("gro-metrics-auth"), unique("gro-metrics-reader")
    cluster_role(kube, reviews, REVIEWS, ns, "operator")
    cluster_role(kube, reader, READER, ns, "prometheus")
    kubeconfig = cluster.kubeconfig_for_token(
        kube.create_token(ns, "operator"), tmp_path / "kubeconfig"
    )
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    try:
        async with client.ApiClient(cfg) as api:
            access = MetricsAccess(ApiReviewer(api))
            prometheus = kube.create_token(ns, "prometheus")
            stranger = kube.create_token(ns, "stranger")
            assert await access.check(f"Bearer {prometheus}") == OK
            assert await access.check(f"Bearer {stranger}") == FORBIDDEN
            assert await access.check("Bearer not-a-token") == UNAUTHENTICATED
    finally:
        for name in (reviews, reader):
            for kind in ("clusterrolebindings", "clusterroles"):
                kube.delete(f"/apis/rbac.authorization.k8s.io/v1/{kind}/{name}")
