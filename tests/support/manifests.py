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
    ("v1", "Service"): ("/api/v1/namespaces/{ns}/services", True),
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
    ("flowcontrol.apiserver.k8s.io/v1", "FlowSchema"): (
        "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
        False,
    ),
    ("networking.k8s.io/v1", "NetworkPolicy"): (
        "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
        True,
    ),
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
    """The objects a kustomization.yaml lists, in its order: files, directories (bases), and
    the two patch forms the overlays use (``$patch: delete`` and JSON 6902 ``add``/``replace``).
    Anything else is refused rather than silently ignored."""
    base = MANIFESTS / folder
    spec = yaml.safe_load((base / "kustomization.yaml").read_text())
    objects: list[dict[str, Any]] = []
    for name in spec["resources"]:
        rel = (Path(folder) / name).as_posix()
        if (MANIFESTS / rel).is_dir():
            sub = (MANIFESTS / rel).resolve().relative_to(MANIFESTS.resolve()).as_posix()
            objects += kustomization("" if sub == "." else sub)
        else:
            objects += load(rel)
    for patch in spec.get("patches", []):
        objects = _patch(objects, patch)
    unknown = set(spec) - {"apiVersion", "kind", "resources", "patches"}
    if unknown:
        raise ValueError(f"{base}/kustomization.yaml: unsupported fields {sorted(unknown)}")
    return objects


def _patch(objects: list[dict[str, Any]], patch: dict[str, Any]) -> list[dict[str, Any]]:
    body = yaml.safe_load(patch["patch"])
    if isinstance(body, dict) and body.get("$patch") == "delete":
        keep = [o for o in objects if not _same(o, body["kind"], body["metadata"]["name"])]
        if len(keep) == len(objects):
            raise ValueError(f"delete patch matches nothing: {body['kind']}/{body['metadata']}")
        return keep
    target = patch.get("target")
    if not target or not isinstance(body, list):
        raise ValueError(f"unsupported patch: {patch}")
    matched = [o for o in objects if _same(o, target["kind"], target["name"])]
    if not matched:
        raise ValueError(f"patch target matches nothing: {target}")
    for obj in matched:
        for op in body:
            _json6902(obj, op)
    return objects


def _same(obj: dict[str, Any], kind: str, name: str) -> bool:
    return bool(obj["kind"] == kind and obj["metadata"]["name"] == name)


def _json6902(obj: dict[str, Any], op: dict[str, Any]) -> None:
    if op["op"] not in ("add", "replace"):
        raise ValueError(f"unsupported JSON patch op {op['op']}")
    *parents, last = op["path"].lstrip("/").split("/")
    node: Any = obj
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        if last == "-":
            node.append(op["value"])
        elif op["op"] == "add":
            node.insert(int(last), op["value"])
        else:
            node[int(last)] = op["value"]
    else:
        node[last] = op["value"]


def apply(kube: KubeClient, obj: dict[str, Any], namespace: str | None = None) -> Any:
    """Create, or replace when it exists (keeping its resourceVersion)."""
    if namespace:
        obj = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
    try:
        return kube.post(collection_path(obj, namespace), obj)
    except KubeError as exc:
        if exc.status != 409:
            raise
    wanted_finalizers = "finalizers" in obj["metadata"]
    for attempt in range(5):
        current = kube.get(object_path(obj, namespace))
        obj = {**obj, "metadata": {**obj["metadata"]}}
        obj["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        # Like kubectl apply, keep what controllers added and the manifest does not mention.
        if "finalizers" in current["metadata"] and not wanted_finalizers:
            obj["metadata"]["finalizers"] = current["metadata"]["finalizers"]
        try:
            return kube.put(object_path(obj, namespace), obj)
        except KubeError as exc:
            # The operator wrote the object (a finalizer, its status) between our read and
            # write: read again and retry, as kubectl does on a conflict.
            if exc.status != 409 or attempt == 4:
                raise
    raise AssertionError("unreachable")
