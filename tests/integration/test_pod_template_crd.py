"""spec.template on a real API server: its schema is the server's own PodTemplateSpec, so a
template is checked as a Deployment's would be, and nothing a user wrote is pruned."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.support.builders import REALISTIC, group
from tests.support.testbed import GROUPS, api_message
from tests.testbed import gen_pod_template_schema
from tests.testbed.kube import KubeClient, KubeError

pytestmark = pytest.mark.integration


def create_strict(kube: KubeClient, ns: str, obj: dict[str, Any]) -> Any:
    """POST as ``kubectl apply`` does by default: unknown fields are errors, not warnings."""
    return kube.request("POST", GROUPS.format(ns=ns), obj, query={"fieldValidation": "Strict"})


def refusal(kube: KubeClient, ns: str, obj: dict[str, Any]) -> tuple[int, str]:
    with pytest.raises(KubeError) as err:
        create_strict(kube, ns, obj)
    return err.value.status, api_message(err.value)


def test_the_generated_template_schema_matches_the_api_server(kube, cluster):
    if cluster.kube_mode != "local":
        pytest.skip("the schema is generated from the pinned Kubernetes, the testbed's own")
    openapi = kube.get(gen_pod_template_schema.OPENAPI_PATH)
    current = gen_pod_template_schema.CRD_FILE.read_text()
    assert gen_pod_template_schema.generated_crd(openapi, current) == current, (
        "manifests/crd.yaml's spec.template is stale: "
        "run python -m tests.testbed.gen_pod_template_schema"
    )


def test_a_misspelt_template_field_is_refused_with_the_servers_message(kube, team_namespace):
    template = {"spec": {"nodeSelectr": {"ci": "true"}}}
    status, message = refusal(kube, team_namespace, group("typo", template=template))
    assert status in (400, 422)
    assert 'unknown field "spec.template.spec.nodeSelectr"' in message


def test_a_wrongly_typed_template_field_is_refused_naming_it(kube, team_namespace):
    template = {"spec": {"containers": [{"name": "runner", "resources": {"limits": "2"}}]}}
    status, message = refusal(kube, team_namespace, group("typed", template=template))
    assert status == 422
    assert "spec.template.spec.containers[0].resources.limits" in message


def test_a_realistic_template_is_stored_exactly_as_written(kube, team_namespace):
    template = copy.deepcopy(REALISTIC)
    runner = template["spec"]["containers"][0]
    runner["resources"]["requests"] = {"cpu": 1, "memory": "1Gi"}  # an integer quantity
    runner["ports"] = [{"containerPort": 8080}]
    template["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "ci", "operator": "In", "values": ["true"]}]}
                ]
            }
        }
    }
    template["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
        }
    ]
    template["spec"]["dnsConfig"] = {"options": [{"name": "ndots", "value": "2"}]}
    template["spec"]["initContainers"].append(
        {"name": "sidecar", "image": "example/proxy:1", "restartPolicy": "Always"}
    )
    created = create_strict(kube, team_namespace, group("full", template=template, mode="host"))
    assert json.dumps(created["spec"]["template"], sort_keys=True) == json.dumps(
        template, sort_keys=True
    )


@pytest.mark.parametrize(
    ("template", "message"),
    [
        (
            {"spec": {"restartPolicy": "Never"}},
            "spec.template.spec.restartPolicy is set by the operator",
        ),
        (
            {"metadata": {"labels": {"gitea.bpg.pw/runnergroup-name": "x"}}},
            "keys under gitea.bpg.pw/ and the node scale-down annotations",
        ),
        ({"metadata": {"name": "x"}}, 'unknown field "spec.template.metadata.name"'),
    ],
)
def test_owned_template_fields_are_refused_by_the_api_server(
    kube, team_namespace, template, message
):
    _, text = refusal(kube, team_namespace, group("owned", template=template))
    assert message in text


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"mode": "podman"}, 'Unsupported value: "podman"'),
        ({"startupTimeout": "30s"}, "spec.startupTimeout must be between 1m and 24h"),
        ({"maxRunnerLifetime": "30s"}, "spec.maxRunnerLifetime must be between 1m and 168h"),
        (
            {"gitea": {"url": "https://g", "caBundle": {}}},
            "set exactly one of configMapKeyRef and secretKeyRef",
        ),
    ],
)
def test_new_fields_are_checked_by_the_crd(kube, team_namespace, spec, message):
    _, text = refusal(kube, team_namespace, group("fields", **spec))
    assert message in text


def test_defaults_of_the_new_fields(kube, team_namespace):
    created = create_strict(kube, team_namespace, group("defaults"))
    assert created["spec"]["mode"] == "dind-userns"
    assert created["spec"]["startupTimeout"] == "10m"
    assert "image" not in created["spec"]  # each mode has its own


def test_the_crd_stays_well_under_the_size_limits(kube):
    crd = kube.get(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/runnergroups.gitea.bpg.pw"
    )
    # etcd's object limit is ~1.5 MiB; client-side `kubectl apply` copies the object into a
    # 256 KiB annotation.
    assert len(json.dumps(crd["spec"], separators=(",", ":"))) < 256 * 1024
