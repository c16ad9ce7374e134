"""The namespaced overlay's own objects (a Role and RoleBinding per watched namespace) are
valid for a real API server, and give the operator what it needs there and nothing elsewhere.
The bindings are pointed at a fresh ServiceAccount: the session's operator account already
holds the cluster-wide role, which would hide a missing rule."""

from __future__ import annotations

import pytest

from tests.support import manifests
from tests.support.testbed import make_namespace, unique

pytestmark = pytest.mark.integration

VERBS = {
    ("batch", "jobs"): ["create", "delete", "list", "watch", "patch"],
    ("gitea.bpg.pw", "runnergroups"): ["list", "watch"],
    ("", "pods"): ["list", "watch"],
    ("", "events"): ["create"],
}


def allowed(kube, user: str, ns: str | None, group: str, resource: str, verb: str) -> bool:
    review = kube.post(
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "resourceAttributes": {
                    "namespace": ns or "", "group": group, "resource": resource, "verb": verb,
                },
            },
        },
    )  # fmt: skip
    return bool(review["status"]["allowed"])


def test_the_overlay_roles_grant_the_operator_its_verbs_only_there(kube, cluster):
    names = {"team-a": unique("nsd-a"), "team-b": unique("nsd-b")}
    home, elsewhere = unique("nsd-op"), unique("nsd-x")
    for ns in [*names.values(), home, elsewhere]:
        make_namespace(kube, ns)
    user = f"system:serviceaccount:{home}:operator"
    try:
        for obj in manifests.kustomization("namespaced"):
            if obj["kind"] in ("Role", "RoleBinding") and obj["metadata"]["namespace"] in names:
                if obj["kind"] == "RoleBinding":
                    obj["subjects"] = [{"kind": "ServiceAccount", "name": "operator",
                                        "namespace": home}]  # fmt: skip
                manifests.apply(kube, obj, namespace=names[obj["metadata"]["namespace"]])
        for (group, resource), verbs in VERBS.items():
            for verb in verbs:
                for ns in names.values():
                    assert allowed(kube, user, ns, group, resource, verb), (ns, resource, verb)
                assert not allowed(kube, user, elsewhere, group, resource, verb), resource
                assert not allowed(kube, user, None, group, resource, verb), resource
        assert not allowed(kube, user, names["team-a"], "", "secrets", "get")
    finally:
        for ns in [*names.values(), home, elsewhere]:
            kube.delete(f"/api/v1/namespaces/{ns}")
