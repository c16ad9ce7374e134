"""The Helm chart with a real ``helm`` (built from its Go module like the testbed's peers):
it lints, renders what each install mode promises, applies to a real API server, and the
operator running as the chart's ServiceAccount with the chart's flags serves a RunnerGroup."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gitea_runner_operator.api.constants import USERNS_RUNTIME_CLASS
from tests.support import manifests
from tests.support.builders import workflow
from tests.support.testbed import (
    group_status,
    kwok_image,
    make_namespace,
    make_tokens,
    ready,
    runner_group,
    runner_jobs,
    unique,
    wait_until,
)
from tests.testbed import build
from tests.testbed.kube import KubeClient, KubeError
from tests.testbed.pytest_plugin import testbed_required as must_have_testbed
from tests.testbed.sandbox import Sandbox

pytestmark = pytest.mark.integration

CHART = manifests.REPO / "charts" / "gitea-runner-operator"
OPERATOR_RULE_RESOURCES = {"runnergroups", "jobs", "pods"}

WORKFLOW = workflow("ci", dict.fromkeys(["one", "two"], "gro-linux"))


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    """The helm binary from the testbed cache, built on first use (a few minutes cold)."""
    if not build.is_built("helm") and shutil.which("go") is None:
        msg = "helm is not built and `go` is not on PATH: python -m tests.testbed build helm"
        if must_have_testbed():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    try:
        build.ensure_built(["helm"])
    except Exception as exc:
        pytest.fail(f"helm could not be built ({type(exc).__name__}): {exc}", pytrace=False)
    return build.binary("helm")


@pytest.fixture
def helm(helm_bin: Path, tmp_path: Path) -> Any:
    """Run helm with its cache, config and data under tmp_path (nothing in ~)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        env[var] = str(tmp_path / var.lower())
    env.pop("KUBECONFIG", None)

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(helm_bin), *args], env=env, capture_output=True, text=True, timeout=120
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc

    return run


def values_file(tmp_path: Path, values: dict[str, Any]) -> str:
    path = tmp_path / f"values-{len(list(tmp_path.glob('values-*')))}.yaml"
    path.write_text(yaml.safe_dump(values))
    return str(path)


def render(
    helm: Any, tmp_path: Path, release: str, namespace: str, values: dict[str, Any]
) -> list[dict[str, Any]]:
    out = helm(
        "template", release, str(CHART), "--namespace", namespace, "--include-crds",
        "-f", values_file(tmp_path, values),
    ).stdout  # fmt: skip
    return [d for d in yaml.safe_load_all(out) if d]


def kinds(objects: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    return [(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in objects]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def operator_service_account(objects: list[dict[str, Any]]) -> str:
    """The operator's own ServiceAccount (the uninstall hook has one of its own)."""
    return str(one([o for o in objects if not _hook(o)], "ServiceAccount")["metadata"]["name"])


def operator_args(objects: list[dict[str, Any]]) -> list[str]:
    deployment = one(objects, "Deployment")
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


def grants_operator_resources(role: dict[str, Any]) -> bool:
    return any(set(r["resources"]) & OPERATOR_RULE_RESOURCES for r in role.get("rules", []))


def test_helm_lint_passes_in_both_install_modes(helm, tmp_path):
    helm("lint", "--strict", str(CHART))
    namespaced = {"rbac": {"mode": "namespaced"}, "watchNamespaces": ["team-a", "team-b"]}
    helm("lint", "--strict", str(CHART), "-f", values_file(tmp_path, namespaced))


def test_the_default_render_is_the_cluster_install(helm, tmp_path):
    objects = render(helm, tmp_path, "gro", "ops", {})
    listed = kinds(objects)
    assert ("CustomResourceDefinition", "runnergroups.gitea.bpg.pw", None) in listed
    crd = one(objects, "CustomResourceDefinition")
    assert crd == manifests.load("crd.yaml")[0]
    cluster_roles = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterRole"}
    assert grants_operator_resources(cluster_roles["gro-gitea-runner-operator"])
    assert cluster_roles["gro-gitea-runner-operator-secrets"]["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
    ]
    args = operator_args(objects)
    assert "--leader-elect" in args and "--leader-election-namespace=ops" in args
    assert not [a for a in args if a.startswith("--namespace")]
    assert not [a for a in args if a.startswith("--webhook-port")]
    service = one(objects, "Service")
    assert service["spec"]["ports"][0]["port"] == 8081
    assert {o["kind"] for o in objects} == {
        "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
        "Role", "RoleBinding", "Service", "Deployment", "Job", "NetworkPolicy", "FlowSchema",
    }  # fmt: skip


def test_the_dind_userns_runtime_class_is_made_only_when_asked_with_the_nodes_handler(
    helm, tmp_path
):
    """Mode dind-userns's Pods name the RuntimeClass gitea-runner-userns; the chart makes it
    with the handler a platform configured on its nodes, and by default leaves it to them."""
    assert not [o for o in render(helm, tmp_path, "gro", "ops", {}) if o["kind"] == "RuntimeClass"]
    values = {
        "usernsRuntimeClass": {
            "create": True,
            "handler": "runc-tun",
            "nodeSelector": {"example.com/userns": "true"},
        }
    }
    runtime_class = one(render(helm, tmp_path, "gro", "ops", values), "RuntimeClass")
    assert runtime_class["metadata"]["name"] == USERNS_RUNTIME_CLASS
    assert runtime_class["handler"] == "runc-tun"
    assert runtime_class["scheduling"] == {"nodeSelector": {"example.com/userns": "true"}}


def test_the_operators_lease_requests_get_the_leader_election_priority_level(helm, tmp_path):
    """Only the release's own ServiceAccount, only Leases, only in the release namespace:
    the FlowSchema lifts nobody else's requests. Off on request (it needs the right to create
    a FlowSchema at install)."""
    flow = one(render(helm, tmp_path, "gro", "ops", {}), "FlowSchema")
    assert flow["spec"]["priorityLevelConfiguration"] == {"name": "leader-election"}
    assert flow["spec"]["matchingPrecedence"] < 9000  # before the suggested service-accounts
    (rule,) = flow["spec"]["rules"]
    assert rule["subjects"] == [
        {"kind": "ServiceAccount",
         "serviceAccount": {"name": "gro-gitea-runner-operator", "namespace": "ops"}}
    ]  # fmt: skip
    (resources,) = rule["resourceRules"]
    assert resources["apiGroups"] == ["coordination.k8s.io"]
    assert resources["resources"] == ["leases"] and resources["namespaces"] == ["ops"]
    off = render(helm, tmp_path, "gro", "ops", {"leaseFlowSchema": {"enabled": False}})
    assert "FlowSchema" not in {o["kind"] for o in off}


def test_the_operator_names_the_secrets_role_of_its_own_release(helm, tmp_path):
    """A "may not read" message tells a team which ClusterRole to bind: the one this release
    made, whatever the release is called (not the plain install's name)."""
    for release, role in (
        ("acme", "acme-gitea-runner-operator-secrets"),
        ("gitea-runner-operator", "gitea-runner-operator-secrets"),
    ):
        objects = render(helm, tmp_path, release, "ops", {})
        cluster_roles = {o["metadata"]["name"] for o in objects if o["kind"] == "ClusterRole"}
        assert role in cluster_roles
        assert f"--secrets-cluster-role={role}" in operator_args(objects)
    objects = render(helm, tmp_path, "acme", "ops", {"rbac": {"secretsClusterRole": False}})
    assert not [a for a in operator_args(objects) if a.startswith("--secrets-cluster-role")]


def test_values_set_the_image_replicas_flags_webhook_and_monitoring(helm, tmp_path):
    objects = render(
        helm, tmp_path, "gitea-runner-operator", "ops",
        {
            "image": {"repository": "registry.invalid/gro", "tag": "9.9.9"},
            "replicaCount": 2,
            "operator": {"logFormat": "console", "workers": 7, "extraArgs": ["--log-level=debug"]},
            "webhook": {"enabled": True},
            "metrics": {
                "serviceMonitor": {"enabled": True},
                "prometheusRule": {"enabled": True},
                "dashboard": {"enabled": True},
            },
            "resources": {"limits": {"memory": "512Mi"}},
        },
    )  # fmt: skip
    deployment = one(objects, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert deployment["spec"]["replicas"] == 2
    assert container["image"] == "registry.invalid/gro:9.9.9"
    assert container["resources"]["limits"]["memory"] == "512Mi"
    args = container["args"]
    wanted = {"--log-format=console", "--workers=7", "--log-level=debug", "--webhook-port=8082"}
    assert wanted <= set(args)
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
    webhook = services["gitea-runner-operator-webhook"]
    assert webhook["spec"]["ports"][0] == {"name": "webhook", "port": 8082, "targetPort": "webhook"}
    assert {"name": "webhook", "containerPort": 8082} in container["ports"]
    rule = one(objects, "PrometheusRule")
    assert rule["spec"] == yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    monitor = one(objects, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    metrics_service = services["gitea-runner-operator-metrics"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= (
        metrics_service["metadata"]["labels"].items()
    )
    dashboard = one(objects, "ConfigMap")
    assert json.loads(dashboard["data"]["gitea-runner-operator.json"])["uid"]


def lease_verbs_called() -> set[str]:
    """The Lease verbs the one Lease client (kube/leases.py, which membership uses whole)
    calls, read from its source: the chart's Role must grant each of them, and no more."""
    source = (manifests.REPO / "gitea_runner_operator" / "kube" / "leases.py").read_text()
    verb = {
        "read": "get",
        "replace": "update",
        "create": "create",
        "list": "list",
        "delete": "delete",
    }
    return {verb[m] for m in re.findall(r"_leases\.(\w+)_namespaced_lease", source)}


def test_sharding_runs_every_replica_with_membership_leases_a_budget_and_spread(helm, tmp_path):
    objects = render(
        helm, tmp_path, "gro", "ops", {"sharding": {"enabled": True}, "replicaCount": 3}
    )  # fmt: skip
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 3
    args = operator_args(objects)
    assert "--sharding" in args and "--leader-election-namespace=ops" in args
    assert "--leader-elect" not in args
    roles = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Role"}
    assert "gro-gitea-runner-operator-leader-election" not in roles
    (rule,) = roles["gro-gitea-runner-operator-members"]["rules"]
    assert rule["apiGroups"] == ["coordination.k8s.io"] and rule["resources"] == ["leases"]
    assert set(rule["verbs"]) == lease_verbs_called() == {"get", "list", "create", "update",
                                                          "delete"}  # fmt: skip
    bindings = {o["metadata"]["name"]: o for o in objects if o["kind"] == "RoleBinding"}
    assert bindings["gro-gitea-runner-operator-members"]["roleRef"]["name"] == (
        "gro-gitea-runner-operator-members"
    )
    pod = deployment["spec"]["template"]
    budget = one(objects, "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (spread,) = pod["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    term = spread["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    # An affinity of one's own replaces the chart's spread.
    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "pool", "operator": "In", "values": ["ops"]}]}]}}}  # fmt: skip
    objects = render(
        helm, tmp_path, "gro", "ops",
        {"sharding": {"enabled": True}, "replicaCount": 3, "affinity": own},
    )  # fmt: skip
    assert one(objects, "Deployment")["spec"]["template"]["spec"]["affinity"] == own
    # Sharding needs no leader election: the flag does not matter then.
    off = {"sharding": {"enabled": True}, "replicaCount": 2, "leaderElection": {"enabled": False}}
    assert "--sharding" in operator_args(render(helm, tmp_path, "gro", "ops", off))


def test_one_replica_renders_no_budget_no_spread_and_no_membership_role(helm, tmp_path):
    objects = render(helm, tmp_path, "gro", "ops", {})
    assert "PodDisruptionBudget" not in {o["kind"] for o in objects}
    assert "affinity" not in one(objects, "Deployment")["spec"]["template"]["spec"]
    roles = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Role" and not _hook(o)}
    assert set(roles) == {"gro-gitea-runner-operator-leader-election"}
    assert "--sharding" not in operator_args(objects)
    # A standby replica gets the budget and the spread too: it is worth little on the
    # leader's node.
    objects = render(helm, tmp_path, "gro", "ops", {"replicaCount": 2})
    assert one(objects, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    assert "--leader-elect" in operator_args(objects)


def _admitted(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Port name -> the peers the chart's NetworkPolicy admits to it."""
    policy = one(objects, "NetworkPolicy")
    pod = one(objects, "Deployment")["spec"]["template"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    ports = {p["name"] for p in pod["spec"]["containers"][0]["ports"]}
    admitted = {}
    for rule in policy["spec"]["ingress"] or []:
        (port,) = rule["ports"]
        assert port["port"] in ports  # a named port of the operator's container
        admitted[port["port"]] = rule["from"]
    return admitted


def test_a_network_policy_admits_only_monitoring_to_metrics_and_only_gitea_to_webhooks(
    helm, tmp_path
):
    def namespace(name: str) -> dict[str, Any]:
        return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}

    objects = render(helm, tmp_path, "gro", "ops", {"webhook": {"enabled": True}})
    assert _admitted(objects) == {
        "health": [namespace("monitoring")],
        "webhook": [namespace("gitea")],
    }
    # Without the receiver, its port is admitted to nobody.
    assert _admitted(render(helm, tmp_path, "gro", "ops", {})) == {
        "health": [namespace("monitoring")]
    }
    gitea = {"ipBlock": {"cidr": "192.0.2.10/32"}}
    prometheus = {
        **namespace("observability"),
        "podSelector": {"matchLabels": {"app": "prometheus"}},
    }
    objects = render(
        helm, tmp_path, "gro", "ops",
        {"webhook": {"enabled": True},
         "networkPolicy": {"metricsFrom": [prometheus], "webhookFrom": [gitea]}},
    )  # fmt: skip
    assert _admitted(objects) == {"health": [prometheus], "webhook": [gitea]}
    # --sharding: the replicas hand one another the deliveries of the groups each serves.
    sharded = {"webhook": {"enabled": True}, "sharding": {"enabled": True}, "replicaCount": 3}
    objects = render(helm, tmp_path, "gro", "ops", sharded)
    pod = one(objects, "Deployment")["spec"]["template"]
    (peers,) = [p for p in _admitted(objects)["webhook"] if "podSelector" in p]
    assert _admitted(objects)["webhook"] == [namespace("gitea"), peers]
    assert peers["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert "namespaceSelector" not in peers  # the release's own namespace, no other
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    objects = render(helm, tmp_path, "gro", "ops", {"networkPolicy": {"enabled": False}})
    assert "NetworkPolicy" not in {o["kind"] for o in objects}


def test_metrics_authentication_adds_the_flag_the_review_rights_and_the_readers_role(
    helm, tmp_path
):
    values = {"metrics": {"authentication": {"enabled": True}, "serviceMonitor": {"enabled": True}}}
    objects = render(helm, tmp_path, "gro", "ops", values)
    assert "--metrics-auth" in operator_args(objects)
    roles = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterRole"}
    assert roles["gro-gitea-runner-operator-metrics-auth"]["rules"] == [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"],
         "verbs": ["create"]},
        {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"],
         "verbs": ["create"]},
    ]  # fmt: skip
    assert roles["gro-gitea-runner-operator-metrics-reader"]["rules"] == [
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}
    ]
    bindings = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterRoleBinding"}
    binding = bindings["gro-gitea-runner-operator-metrics-auth"]
    service_account = operator_service_account(objects)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": service_account, "namespace": "ops"}
    ]
    (endpoint,) = one(objects, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    plain = render(helm, tmp_path, "gro", "ops", {"metrics": {"serviceMonitor": {"enabled": True}}})
    assert "--metrics-auth" not in operator_args(plain)
    assert "bearerTokenFile" not in one(plain, "ServiceMonitor")["spec"]["endpoints"][0]
    assert not [o for o in plain if o["metadata"]["name"].endswith("-metrics-reader")]


def test_the_argocd_health_check_renders_as_the_argocd_cm_key(helm, tmp_path):
    objects = render(
        helm, tmp_path, "gro", "ops",
        {"argocd": {"healthCheck": {"configMap": True}, "namespace": "argocd"}},
    )  # fmt: skip
    (found,) = [
        o for o in objects if o["metadata"]["name"] == "gro-gitea-runner-operator-argocd-health"
    ]
    assert found["kind"] == "ConfigMap" and found["metadata"]["namespace"] == "argocd"
    script = found["data"]["resource.customizations.health.gitea.bpg.pw_RunnerGroup"]
    assert script.strip() == (CHART / "files" / "argocd-health.lua").read_text().strip()
    assert not [
        o for o in render(helm, tmp_path, "gro", "ops", {}) if "argocd" in o["metadata"]["name"]
    ]


def test_the_namespaced_render_has_roles_per_namespace_and_no_cluster_role_for_jobs(helm, tmp_path):
    objects = render(
        helm, tmp_path, "gro", "ops",
        {"rbac": {"mode": "namespaced"}, "watchNamespaces": ["team-a", "team-b"]},
    )  # fmt: skip
    # One cluster-wide binding: get on the watched Namespaces by name (their own Roles are
    # deleted first when they are deleted, tests/integration/test_namespace_reader.py).
    (binding,) = [o for o in objects if o["kind"] == "ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == "gro-gitea-runner-operator-namespaces"
    for role in (o for o in objects if o["kind"] == "ClusterRole"):
        assert not grants_operator_resources(role), role["metadata"]["name"]
        if role["metadata"]["name"] == "gro-gitea-runner-operator-namespaces":
            (rule,) = role["rules"]
            assert rule["resourceNames"] == ["team-a", "team-b"] and rule["verbs"] == ["get"]
    roles = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects
             if o["kind"] == "Role"}  # fmt: skip
    for ns in ("team-a", "team-b"):
        assert grants_operator_resources(roles[(ns, "gro-gitea-runner-operator")])
        assert ("RoleBinding", "gro-gitea-runner-operator", ns) in kinds(objects)
    args = operator_args(objects)
    assert [a for a in args if a.startswith("--namespace")] == [
        "--namespace=team-a",
        "--namespace=team-b",
    ]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"rbac": {"mode": "namespaced"}}, "rbac.mode=namespaced needs watchNamespaces"),
        ({"rbac": {"mode": "everywhere"}}, "rbac.mode must be cluster or namespaced"),
        ({"replicaCount": 2, "leaderElection": {"enabled": False}}, "needs leaderElection"),
        (
            {
                "replicaCount": 2,
                "leaderElection": {"enabled": False},
                "sharding": {"enabled": False},
            },
            "(or sharding.enabled)",
        ),
    ],
)
def test_values_that_cannot_work_are_refused_by_name(helm, tmp_path, values, message):
    proc = helm("template", "gro", str(CHART), "-f", values_file(tmp_path, values), check=False)
    assert proc.returncode != 0
    assert message in proc.stderr


# -- on the testbed -------------------------------------------------------------------------

_CLUSTER_SCOPED = {
    "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Namespace", "FlowSchema",
}  # fmt: skip


@contextlib.contextmanager
def installed(kube: KubeClient, objects: list[dict[str, Any]]) -> Iterator[None]:
    """Apply rendered objects as ``helm install`` would; remove the cluster-scoped ones
    after (namespaces are deleted by the test). The CRD stays: the session shares it."""
    objects = [o for o in objects if not _hook(o)]  # helm install runs no pre-delete hook
    for obj in objects:
        manifests.apply(kube, obj)
    try:
        yield
    finally:
        for obj in objects:
            if obj["kind"] in _CLUSTER_SCOPED - {"CustomResourceDefinition"}:
                with contextlib.suppress(KubeError):
                    kube.delete(manifests.object_path(obj))


def _hook(obj: dict[str, Any]) -> bool:
    return "helm.sh/hook" in (obj["metadata"].get("annotations") or {})


HOOK_NAME = "gro-gitea-runner-operator-uninstall"
GROUP_RIGHTS = {"apiGroups": ["gitea.bpg.pw"], "resources": ["runnergroups"]}


def _hook_args(objects: list[dict[str, Any]]) -> list[str]:
    return list(one(objects, "Job")["spec"]["template"]["spec"]["containers"][0]["args"])


def test_uninstall_by_default_detaches_the_groups_and_stops_the_operator_first(helm, tmp_path):
    """The order of helm uninstall: the hook (the operator's image, its own ServiceAccount)
    has the still running operator release the RunnerGroups, left in place, and stops it
    before the Deployment goes. Its rights may mark groups, never delete one."""
    objects = render(helm, tmp_path, "gro", "ops", {"image": {"tag": "9.9.9"}})
    hooks = [o for o in objects if _hook(o)]
    assert sorted(kinds(hooks)) == [
        ("ClusterRole", HOOK_NAME, None), ("ClusterRoleBinding", HOOK_NAME, None),
        ("Job", HOOK_NAME, "ops"),
        ("Role", f"{HOOK_NAME}-stop", "ops"), ("RoleBinding", f"{HOOK_NAME}-stop", "ops"),
        ("ServiceAccount", HOOK_NAME, "ops"),
    ]  # fmt: skip
    assert {o["metadata"]["annotations"]["helm.sh/hook"] for o in hooks} == {"pre-delete"}
    pod = one(objects, "Job")["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "gitea-runner-operator:9.9.9"
    assert _hook_args(objects) == [
        "detach-groups", "--timeout=270",
        "--deployment=gro-gitea-runner-operator", "--deployment-namespace=ops",
    ]  # fmt: skip
    assert one(objects, "Deployment")["metadata"]["name"] == "gro-gitea-runner-operator"
    assert pod["serviceAccountName"] == HOOK_NAME
    role = next(o for o in hooks if o["kind"] == "ClusterRole")
    assert role["rules"] == [{**GROUP_RIGHTS, "verbs": ["list", "patch"]}]
    stop = next(o for o in hooks if o["kind"] == "Role")
    assert stop["rules"][0]["resourceNames"] == ["gro-gitea-runner-operator"]
    assert stop["rules"][0]["verbs"] == ["get", "patch"]
    # SA and RBAC first (weight -5), then the Job (0); every one removed however it ended
    weights = {o["kind"]: int(o["metadata"]["annotations"]["helm.sh/hook-weight"]) for o in hooks}
    assert weights["ServiceAccount"] == weights["ClusterRole"] < weights["Job"]
    for o in hooks:
        policy = o["metadata"]["annotations"]["helm.sh/hook-delete-policy"].split(",")
        assert {"hook-succeeded", "hook-failed"} <= set(policy), o["kind"]
    # a hung hook fails on its own, after the wait and the operator's stop
    assert one(objects, "Job")["spec"]["activeDeadlineSeconds"] == 270 + 90
    off = render(helm, tmp_path, "gro", "ops", {"uninstall": {"hook": False}})
    assert not [o for o in off if _hook(o)]


def test_uninstall_deletes_the_groups_only_when_asked_in_either_install_mode(helm, tmp_path):
    cluster = render(helm, tmp_path, "gro", "ops", {"uninstall": {"deleteGroups": True}})
    assert _hook_args(cluster) == ["drain-groups", "--timeout=270"]
    role = one([o for o in cluster if _hook(o)], "ClusterRole")
    assert role["rules"] == [{**GROUP_RIGHTS, "verbs": ["list", "patch", "delete"]}]
    # the operator is not stopped: the groups go, and with them what it would serve
    assert not [o for o in cluster if _hook(o) and o["kind"] == "Role"]
    for delete in (False, True):
        namespaced = render(
            helm, tmp_path, "gro", "ops",
            {"rbac": {"mode": "namespaced"}, "watchNamespaces": ["team-a", "team-b"],
             "uninstall": {"deleteGroups": delete}},
        )  # fmt: skip
        hooks = [o for o in namespaced if _hook(o)]
        assert not [o for o in hooks if o["kind"].startswith("Cluster")]
        for ns in ("team-a", "team-b"):
            assert ("Role", HOOK_NAME, ns) in kinds(hooks)
            assert ("RoleBinding", HOOK_NAME, ns) in kinds(hooks)
        args = _hook_args(namespaced)
        assert args[0] == ("drain-groups" if delete else "detach-groups")
        assert args[-2:] == ["--namespace=team-a", "--namespace=team-b"]


def can(client: KubeClient, path: str) -> bool:
    try:
        client.get(path)
        return True
    except KubeError as exc:
        if exc.status == 403:
            return False
        raise


def test_the_cluster_chart_applies_and_its_serviceaccount_may_act_everywhere(
    kube, cluster, helm, tmp_path, kwok
):
    release, ns = unique("gro"), unique("ops")
    manifests.apply(
        kube,
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": ns,
                "labels": {"pod-security.kubernetes.io/enforce": "restricted"},
            },
        },
    )
    other = make_namespace(kube, unique("team"))
    try:
        objects = render(helm, tmp_path, release, ns, {})
        with installed(kube, objects):
            # kwok plays the kubelet: "available" proves Pod Security "restricted" admission,
            # scheduling and the probes' shape, not the image.
            path = f"/apis/apps/v1/namespaces/{ns}/deployments/{release}-gitea-runner-operator"
            wait_until(
                lambda: kube.get(path).get("status", {}).get("availableReplicas") == 1,
                timeout=90,
                what="chart Deployment available",
            )
            kube.patch(path, {"spec": {"replicas": 0}})
            sa = operator_service_account(objects)
            operator = cluster.kube_client(token=kube.create_token(ns, sa))
            assert can(operator, "/apis/batch/v1/jobs")
            assert can(operator, f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{other}/runnergroups")
            assert not can(operator, f"/api/v1/namespaces/{other}/secrets")
    finally:
        kube.delete(f"/api/v1/namespaces/{ns}")
        kube.delete(f"/api/v1/namespaces/{other}")


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
           **labels: str) -> float:  # fmt: skip
    return samples.get(("gitea_runner_operator_" + name, frozenset(labels.items())), 0.0)


def test_the_namespaced_chart_serves_a_runnergroup_as_its_serviceaccount(
    kube, gitea, cluster, gitea_target, start_operator, kwok, helm, tmp_path
):
    release, ns = unique("gro"), make_namespace(kube, unique("ops"), privileged=False)
    team, elsewhere = make_namespace(kube, unique("team")), make_namespace(kube, unique("team"))
    try:
        objects = render(
            helm, tmp_path, release, ns,
            {"rbac": {"mode": "namespaced", "grantSecretAccess": True},
             "watchNamespaces": [team], "replicaCount": 0},
        )  # fmt: skip
        with installed(kube, objects):
            sa = operator_service_account(objects)
            token = kube.create_token(ns, sa)
            operator = cluster.kube_client(token=token)
            # Roles only where it watches: nothing cluster-wide, nothing in other namespaces.
            assert can(operator, f"/apis/batch/v1/namespaces/{team}/jobs")
            assert not can(operator, "/apis/batch/v1/jobs")
            assert not can(operator, f"/apis/batch/v1/namespaces/{elsewhere}/jobs")
            assert not can(operator, f"/api/v1/namespaces/{elsewhere}/secrets/x")

            # The operator as the Deployment would run it: the chart's flags, the chart's SA.
            args = [a for a in operator_args(objects) if not a.startswith("--health-port")]
            op = start_operator(extra=tuple(args), token=token)

            make_tokens(kube, team, cluster, gitea_target)
            gitea.push_workflow(gitea_target.org, gitea_target.repo, "ci.yml", WORKFLOW)
            gitea.wait_for_jobs(gitea_target.org, gitea_target.repo, "queued", count=2)
            group = runner_group(
                "ci", target=gitea_target, url=cluster.gitea_url, image=kwok_image(60)
            )
            manifests.apply(kube, group, namespace=team)
            wait_until(lambda: len(runner_jobs(kube, team, "ci")) == 2, what="two runner Jobs")
            status = wait_until(
                lambda: (s := group_status(kube, team, "ci")).get("activeRunners") == 2 and s,
                what="status: 2 active",
            )
            assert ready(status)["status"] == "True"

            # /metrics tells what happened: one leader, two Job creations that succeeded.
            def created() -> float:
                return sample(
                    scrape(op.health_port),
                    "kube_writes_total", verb="create", resource="jobs", outcome="success",
                )  # fmt: skip

            wait_until(lambda: created() == 2, what="2 Job creations counted")
            assert created() == len(runner_jobs(kube, team, "ci")) == 2
            metrics = scrape(op.health_port)
            assert sample(metrics, "leader") == 1
            assert sample(metrics, "workqueue_adds_total") >= 1
            assert sample(metrics, "reconcile_duration_seconds_count", result="success") >= 1
            # The lease it took is the one its chart Role allows, in the release namespace.
            lease = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases")["items"]
            assert [item["metadata"]["name"] for item in lease] == ["gitea-runner-operator"]
    finally:
        for name in (team, elsewhere, ns):
            kube.delete(f"/api/v1/namespaces/{name}")


FORWARD_KEY = "/etc/gitea-runner-operator/forward-key/key"


def test_the_sharded_chart_serves_a_runnergroup_and_its_status_says_which_replica(
    kube, gitea, cluster, gitea_target, start_operator, kwok, helm, tmp_path
):
    """--sharding as the chart runs it, with the chart's Role for the membership Leases: the
    replica takes its Lease, serves the group, and the group's status and /metrics name the
    domain and the replica, the Lease's holder."""
    release, ns = unique("gro"), make_namespace(kube, unique("ops"), privileged=False)
    team = make_namespace(kube, unique("team"))
    try:
        objects = render(
            helm, tmp_path, release, ns,
            {"rbac": {"mode": "namespaced", "grantSecretAccess": True},
             "watchNamespaces": [team], "replicaCount": 0, "sharding": {"enabled": True}},
        )  # fmt: skip
        with installed(kube, objects):
            sa = operator_service_account(objects)
            token = kube.create_token(ns, sa)
            args = [a for a in operator_args(objects) if not a.startswith("--health-port")]
            assert "--sharding" in args
            # The replicas' forward key, as the chart's Secret holds it and its Pod mounts it.
            secret = next(o for o in objects if o["metadata"]["name"].endswith("-forward-key"))
            key_file = tmp_path / "forward-key"
            key_file.write_bytes(base64.b64decode(secret["data"]["key"]))
            assert f"--forward-key-file={FORWARD_KEY}" in args
            args = [f"--forward-key-file={key_file}" if a.startswith("--forward-key") else a
                    for a in args]  # fmt: skip
            op = start_operator(extra=tuple(args), token=token)

            make_tokens(kube, team, cluster, gitea_target)
            group = runner_group(
                "ci", target=gitea_target, url=cluster.gitea_url, image=kwok_image(60)
            )
            manifests.apply(kube, group, namespace=team)
            status = wait_until(
                lambda: (s := group_status(kube, team, "ci")).get("domain") and s,
                timeout=60,
                what="status.domain written",
            )
            assert ready(status)["status"] == "True"
            domain = status["domain"]
            assert re.fullmatch(r"d-[0-9a-f]{12}", domain["id"]) and domain["spans"] == "family"
            leases = kube.get(
                f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
                labelSelector="gitea-runners.dev/members",
            )["items"]
            assert [lease["spec"]["holderIdentity"] for lease in leases] == [domain["servedBy"]]
            metrics = scrape(op.health_port)
            assert sample(
                metrics, "group_domain_info",
                namespace=team, runnergroup="ci", domain=domain["id"], replica=domain["servedBy"],
            ) == 1  # fmt: skip
    finally:
        for name in (team, ns):
            kube.delete(f"/api/v1/namespaces/{name}")


def test_on_an_api_server_with_priority_and_fairness_only_the_operators_leases_are_lifted(
    helm: Any, tmp_path: Path
) -> None:
    """The chart's FlowSchema on a real API server with API Priority and Fairness on (the
    shared testbed runs without it): the operator's Lease requests are served at the
    leader-election priority level; its other requests, and another ServiceAccount's Lease
    requests, are not."""
    release, ns = "gro", "ops"
    objects = render(helm, tmp_path, release, ns, {"sharding": {"enabled": True}})
    with Sandbox(gitea=False, harness_node=False, priority_and_fairness=True) as sandbox:
        kube = sandbox.kube
        assert kube is not None
        manifests.apply(kube, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        for obj in objects:
            if obj["kind"] in ("FlowSchema", "ServiceAccount"):
                manifests.apply(kube, obj)
        other = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "someone"}}
        manifests.apply(kube, other, namespace=ns)
        level = "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations"
        lifted = kube.get(f"{level}/leader-election")["metadata"]["uid"]
        operator = kube.with_token(kube.create_token(ns, operator_service_account(objects)))
        someone = kube.with_token(kube.create_token(ns, "someone"))
        leases = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"

        def level_of(client: KubeClient, path: str) -> str:
            return client.headers(path).get("x-kubernetes-pf-prioritylevel-uid", "")

        assert wait_until(lambda: level_of(operator, leases) == lifted, timeout=30, what="lifted")
        assert level_of(operator, f"/api/v1/namespaces/{ns}/configmaps") not in ("", lifted)
        assert level_of(someone, leases) not in ("", lifted)
        elsewhere = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
        assert level_of(operator, elsewhere) != lifted
