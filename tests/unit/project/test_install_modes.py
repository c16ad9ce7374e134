"""The namespaced kustomize overlay gives the operator exactly the base's rules, as Roles in
the namespaces it is told to watch, and nothing cluster-wide for RunnerGroups, Jobs or Pods."""

from __future__ import annotations

from typing import Any

from tests.support import manifests

OPERATOR_RESOURCES = {"runnergroups", "jobs", "pods"}


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def test_the_namespaced_overlay_grants_roles_only_where_it_watches():
    base = manifests.kustomization()
    overlay = manifests.kustomization("namespaced")
    for role in by_kind(overlay, "ClusterRole"):
        granted = {r for rule in role["rules"] for r in rule["resources"]}
        assert not granted & OPERATOR_RESOURCES, role["metadata"]["name"]

    (deployment,) = by_kind(overlay, "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    watched = {a.split("=", 1)[1] for a in args if a.startswith("--namespace=")}
    assert watched == {"team-a", "team-b"}

    # One cluster-wide binding: get on the watched Namespaces by name, which a namespace's
    # own Role stops granting once the namespace is being deleted (its Roles go first).
    (binding,) = by_kind(overlay, "ClusterRoleBinding")
    (namespaces,) = [
        o
        for o in by_kind(overlay, "ClusterRole")
        if o["metadata"]["name"] == binding["roleRef"]["name"]
    ]
    assert namespaces["rules"] == [
        {"apiGroups": [""], "resources": ["namespaces"], "resourceNames": sorted(watched),
         "verbs": ["get"]}
    ]  # fmt: skip

    (cluster_role,) = [
        o for o in by_kind(base, "ClusterRole") if o["metadata"]["name"] == "gitea-runner-operator"
    ]
    roles = {
        o["metadata"]["namespace"]: o
        for o in by_kind(overlay, "Role")
        if o["metadata"]["name"] == "gitea-runner-operator"
    }
    bindings = {
        o["metadata"]["namespace"]: o
        for o in by_kind(overlay, "RoleBinding")
        if o["metadata"]["name"] == "gitea-runner-operator"
    }
    assert set(roles) == set(bindings) == watched
    for ns in watched:
        assert roles[ns]["rules"] == cluster_role["rules"]  # the same rules, never drifting
        assert bindings[ns]["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "gitea-runner-operator",
        }
        (subject,) = bindings[ns]["subjects"]
        assert (subject["name"], subject["namespace"]) == (
            "gitea-runner-operator",
            "gitea-runner-operator",
        )


def test_the_base_is_unchanged_by_the_overlay_loader():
    kinds = [o["kind"] for o in manifests.kustomization()]
    assert kinds.count("ClusterRoleBinding") == 1
    assert "--namespace=team-a" not in str(manifests.kustomization())
