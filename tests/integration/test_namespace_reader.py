"""The namespaced install lets the operator read its watched Namespace, on a real API server.

A deleting group may use the token of its last good answer only while its whole namespace is
being deleted (poll/last_good.py), which kube/namespaces.NamespaceReader reads from the
Namespace object. Namespaces are cluster-wide objects, so whether the overlay's Role (``get``
on ``namespaces``, in the watched namespace) grants that read is the API server's call: it
does, because a request for a Namespace is authorised in that namespace. A fresh
ServiceAccount is used, as in test_namespaced_install.py: the session's operator account
holds the cluster-wide role, which would hide a missing rule.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio import config

from gitea_runner_operator.kube.namespaces import NamespaceReader
from tests.support import manifests
from tests.support.testbed import make_namespace, unique
from tests.testbed.kube import KubeError

pytestmark = pytest.mark.integration

HOLD = "bench.gitea.bpg.pw/hold"  # keeps a deleted namespace Terminating while we look


def _deleting(kubeconfig: Any, namespaces: list[str]) -> list[bool]:
    async def read() -> list[bool]:
        api = await config.new_client_from_config(config_file=str(kubeconfig))
        try:
            reader = NamespaceReader(api)
            return [await reader.deleting(ns) for ns in namespaces]
        finally:
            await api.close()

    return asyncio.run(read())


def test_the_namespaced_role_lets_the_operator_see_its_namespace_being_deleted(kube, cluster):
    team, home, elsewhere = unique("nsr-a"), unique("nsr-op"), unique("nsr-x")
    for ns in (team, home, elsewhere):
        make_namespace(kube, ns)
    held = f"/api/v1/namespaces/{team}/configmaps/held"
    try:
        kube.post(
            f"/api/v1/namespaces/{home}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "operator"}},
        )
        for obj in manifests.kustomization("namespaced"):
            if obj["kind"] in ("Role", "RoleBinding") and obj["metadata"]["namespace"] == "team-a":
                if obj["kind"] == "RoleBinding":
                    obj["subjects"] = [{"kind": "ServiceAccount", "name": "operator",
                                        "namespace": home}]  # fmt: skip
                manifests.apply(kube, obj, namespace=team)
        token = kube.create_token(home, "operator")
        operator = kube.with_token(token)
        kubeconfig = cluster.kubeconfig_for_token(token)

        assert operator.get(f"/api/v1/namespaces/{team}")["metadata"]["name"] == team
        with pytest.raises(KubeError) as refused:
            operator.get(f"/api/v1/namespaces/{elsewhere}")
        assert refused.value.status == 403
        assert _deleting(kubeconfig, [team, elsewhere]) == [False, False]

        # The team's namespace is deleted whole; a finalizer keeps it Terminating (and the
        # Role in it) while the operator looks.
        kube.post(
            f"/api/v1/namespaces/{team}/configmaps",
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "held", "finalizers": [HOLD]}},
        )  # fmt: skip
        kube.delete(f"/api/v1/namespaces/{team}")
        assert operator.get(f"/api/v1/namespaces/{team}")["status"]["phase"] == "Terminating"
        assert _deleting(kubeconfig, [team, elsewhere]) == [True, False]
    finally:
        if kube.exists(held):
            kube.patch(held, {"metadata": {"finalizers": None}})
        for ns in (team, home, elsewhere):
            kube.delete(f"/api/v1/namespaces/{ns}")
