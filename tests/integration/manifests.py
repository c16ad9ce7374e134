"""Apply the repository's own YAML to a cluster, the way ``kubectl apply`` would for the few
kinds the tests need, through the testbed's plain HTTP client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.testbed.kube import KubeClient, KubeError

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"

_PATHS = {
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): (
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        False,
    ),
    ("v1", "Namespace"): ("/api/v1/namespaces", False),
    ("v1", "ServiceAccount"): ("/api/v1/namespaces/{ns}/serviceaccounts", True),
    ("v1", "Secret"): ("/api/v1/namespaces/{ns}/secrets", True),
    ("v1", "ConfigMap"): ("/api/v1/namespaces/{ns}/configmaps", True),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): (
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        False,
    ),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): (
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        False,
    ),
    ("rbac.authorization.k8s.io/v1", "Role"): (
        "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        True,
    ),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): (
        "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
        True,
    ),
    ("apps/v1", "Deployment"): ("/apis/apps/v1/namespaces/{ns}/deployments", True),
    ("gitea.bpg.pw/v1alpha1", "RunnerGroup"): (
        "/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups",
        True,
    ),
}


def collection_path(obj: dict[str, Any], namespace: str | None = None) -> str:
    template, namespaced = _PATHS[(obj["apiVersion"], obj["kind"])]
    ns = namespace or obj["metadata"].get("namespace")
    if namespaced and not ns:
        raise ValueError(f"{obj['kind']} {obj['metadata']['name']} needs a namespace")
    return template.format(ns=ns)


def object_path(obj: dict[str, Any], namespace: str | None = None) -> str:
    return f"{collection_path(obj, namespace)}/{obj['metadata']['name']}"


def load(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]


def kustomization(folder: str = "") -> list[dict[str, Any]]:
    """The objects a plain (no patches) kustomization.yaml lists, in its order."""
    base = MANIFESTS / folder
    listed = yaml.safe_load((base / "kustomization.yaml").read_text())["resources"]
    return [obj for name in listed for obj in load(str(Path(folder) / name))]


def apply(kube: KubeClient, obj: dict[str, Any], namespace: str | None = None) -> Any:
    """Create, or replace when it exists (keeping its resourceVersion)."""
    if namespace:
        obj = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
    try:
        return kube.post(collection_path(obj, namespace), obj)
    except KubeError as exc:
        if exc.status != 409:
            raise
    current = kube.get(object_path(obj, namespace))
    obj["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    return kube.put(object_path(obj, namespace), obj)
