"""The namespaced install lets the operator see its watched Namespace being deleted, on a
real API server.

A deleting group may use the token of its last good answer only while its whole namespace is
being deleted (poll/last_good.py), which kube/namespaces.NamespaceReader reads from the
Namespace object. A Role in the namespace granting ``get`` on ``namespaces`` does let the
operator read it (the API server authorises a Namespace's read in that namespace), but only
while the Role exists: once the namespace is being deleted, the namespace controller deletes
its Roles too, the read answers 403, and the reader takes that for "not being deleted". So
the overlay (and the chart's namespaced mode) grants it with a ClusterRole naming the watched
Namespaces. A fresh ServiceAccount is used, as in test_namespaced_install.py: the session's
operator account holds the cluster-wide role, which would hide a missing rule.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio import config

from gitea_runner_operator.kube.namespaces import NamespaceReader
from tests.support import manifests
from tests.support.testbed import make_namespace, unique
from tests.testbed.kube import KubeError, wait_for

pytestmark = pytest.mark.integration

HOLD = "bench.gitea.bpg.pw/hold"  # keeps a deleted namespace Terminating while we look
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def _deleting(kubeconfig: Any, namespaces: list[str]) -> list[bool]:
    async def read() -> list[bool]:
        api = await config.new_client_from_config(config_file=str(kubeconfig))
        try:
            reader = NamespaceReader(api)
            return [await reader.deleting(ns) for ns in namespaces]
        finally:
            await api.close()

    return asyncio.run(read())


def _install(kube: Any, team: str, home: str) -> None:
    """The overlay's objects for its namespace team-a, bound to ``home``'s account; its
    cluster-wide ones renamed for this test, naming ``team``."""
    for obj in manifests.kustomization("namespaced"):
        kind, name = obj["kind"], obj["metadata"]["name"]
        if kind in ("RoleBinding", "ClusterRoleBinding"):
            obj["subjects"] = [{"kind": "ServiceAccount", "name": "operator", "namespace": home}]
        if kind in ("Role", "RoleBinding") and obj["metadata"]["namespace"] == "team-a":
            manifests.apply(kube, obj, namespace=team)
        elif kind in ("ClusterRole", "ClusterRoleBinding") and name.endswith("-namespaces"):
            obj["metadata"]["name"] = f"{home}-namespaces"
            if kind == "ClusterRole":
                obj["rules"][0]["resourceNames"] = [team]
            else:
                obj["roleRef"]["name"] = f"{home}-namespaces"
            manifests.apply(kube, obj)


def test_the_namespaced_install_lets_the_operator_see_its_namespace_being_deleted(kube, cluster):
    team, home, elsewhere = unique("nsr-a"), unique("nsr-op"), unique("nsr-x")
    for ns in (team, home, elsewhere):
        make_namespace(kube, ns)
    held = f"/api/v1/namespaces/{team}/configmaps/held"
    try:
        kube.post(
            f"/api/v1/namespaces/{home}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "operator"}},
        )
        _install(kube, team, home)
        token = kube.create_token(home, "operator")
        operator = kube.with_token(token)
        kubeconfig = cluster.kubeconfig_for_token(token)

        assert operator.get(f"/api/v1/namespaces/{team}")["metadata"]["name"] == team
        with pytest.raises(KubeError) as refused:
            operator.get(f"/api/v1/namespaces/{elsewhere}")
        assert refused.value.status == 403
        assert _deleting(kubeconfig, [team, elsewhere]) == [False, False]

        # The team's namespace is deleted whole; a finalizer keeps it Terminating while the
        # namespace controller deletes what it holds, its Role and RoleBinding first of all.
        kube.post(
            f"/api/v1/namespaces/{team}/configmaps",
            {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "held", "finalizers": [HOLD]}},
        )  # fmt: skip
        kube.delete(f"/api/v1/namespaces/{team}")
        wait_for(lambda: not kube.get(f"{RBAC}/namespaces/{team}/roles")["items"], timeout=60)
        assert operator.get(f"/api/v1/namespaces/{team}")["status"]["phase"] == "Terminating"
        assert _deleting(kubeconfig, [team, elsewhere]) == [True, False]
    finally:
        if kube.exists(held):
            kube.patch(held, {"metadata": {"finalizers": None}})
        for ns in (team, home, elsewhere):
            kube.delete(f"/api/v1/namespaces/{ns}")
        for kind in ("clusterrolebindings", "clusterroles"):
            kube.delete(f"{RBAC}/{kind}/{home}-namespaces")
