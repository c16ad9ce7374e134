"""What ``kubectl get rg`` and ``kubectl explain runnergroup.spec`` show a user: the printer
columns they need at a glance, and a description for every field they can set (the pod
template's fields are Kubernetes' own and documented by its generated schema)."""

from __future__ import annotations

from typing import Any

import yaml

from gitea_runner_operator.api.placement import Placement
from tests.support import REPO_ROOT

REPO = REPO_ROOT
CRD = yaml.safe_load((REPO / "manifests" / "crd.yaml").read_text())
VERSION = CRD["spec"]["versions"][0]
SPEC = VERSION["schema"]["openAPIV3Schema"]["properties"]["spec"]


def _undocumented(schema: dict[str, Any], path: str) -> list[str]:
    missing = []
    for name, prop in (schema.get("properties") or {}).items():
        where = f"{path}.{name}"
        if not prop.get("description"):
            missing.append(where)
        if where == "spec.template":
            continue  # Kubernetes' PodTemplateSpec, generated with its own descriptions
        missing += _undocumented(prop, where)
        if isinstance(prop.get("items"), dict):
            missing += _undocumented(prop["items"], f"{where}[]")
    return missing


def test_kubectl_explain_documents_the_spec_and_every_field_under_it():
    assert SPEC.get("description")
    assert _undocumented(SPEC, "spec") == []


def test_kubectl_get_rg_shows_scope_target_capacity_demand_and_readiness():
    assert "rg" in CRD["spec"]["names"]["shortNames"]
    columns = {c["name"]: c for c in VERSION["additionalPrinterColumns"]}
    default = [name for name, c in columns.items() if not c.get("priority")]
    assert default == [
        "Scope", "Target", "Max", "Active", "Queued", "Ready", "Oldest waiting", "Age",
    ]  # fmt: skip
    # -o wide adds why a group is not Ready
    assert columns["Reason"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].reason'
    assert columns["Mode"]["priority"] == 1
    # -o wide also names the capacity domain and the replica serving it (--sharding)
    assert columns["Domain"]["jsonPath"] == ".status.domain.id"
    assert columns["Served by"]["jsonPath"] == ".status.domain.servedBy"
    assert columns["Domain"]["priority"] == columns["Served by"]["priority"] == 1


def test_the_status_keeps_every_field_of_a_groups_domain():
    status = VERSION["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    domain = status["domain"]["properties"]
    for whole in (False, True):
        written = Placement("d-0123456789ab", "gro-5f7c9-x2x7q_1a2b3c4d", whole).status()
        assert set(written) == set(domain)
        assert written["spans"] in domain["spans"]["enum"]


def test_the_charts_crd_is_the_same_file():
    chart = REPO / "charts" / "gitea-runner-operator" / "crds" / "crd.yaml"
    assert chart.read_text() == (REPO / "manifests" / "crd.yaml").read_text()


def test_kubectl_get_rg_wide_shows_the_poll_interval_in_force_and_why():
    from gitea_runner_operator.api.cadence import CadenceReason

    wide = {c["name"]: c for c in VERSION["additionalPrinterColumns"] if c.get("priority") == 1}
    assert wide["Poll"]["jsonPath"] == ".status.poll.interval"
    assert wide["Poll reason"]["jsonPath"] == ".status.poll.reason"
    status = VERSION["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    # Every reason the operator writes is one the API server accepts in the status patch.
    assert status["poll"]["properties"]["reason"]["enum"] == [r.value for r in CadenceReason]
