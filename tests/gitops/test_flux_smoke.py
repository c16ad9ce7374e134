"""The testbed's Flux and kstatus work as a platform engineer's would: a folder in Git is
applied, waited for and pruned; kstatus reads a custom resource's conditions the way the
GitOps tools that use it do. The RunnerGroup scenarios build on both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.testbed.gitops import KUSTOMIZE_API, Flux, condition_of, kstatus, kustomization
from tests.testbed.kube import KubeClient, wait_for


def _config_map(namespace: str, name: str, value: str) -> str:
    return (
        "apiVersion: v1\nkind: ConfigMap\n"
        f"metadata:\n  name: {name}\n  namespace: {namespace}\n"
        f"data:\n  value: {value!r}\n"
    )


def test_flux_applies_a_folder_from_gitea_waits_for_it_and_prunes_what_left_git(
    flux: Flux, flux_source: Any, kube: KubeClient
) -> None:
    ns = flux_source.namespace
    cms = f"/api/v1/namespaces/{ns}/configmaps"
    first = flux_source.commit(
        {
            "team/kept.yaml": _config_map(ns, "kept", "1"),
            "team/removed.yaml": _config_map(ns, "removed", "1"),
        },
        "team: two ConfigMaps",
    )
    flux.apply(kustomization(ns, "team", flux_source.name, "./team"))

    applied = flux.wait_ready(
        KUSTOMIZE_API,
        "kustomizations",
        ns,
        "team",
        timeout=120,
        until=lambda k: k["status"].get("lastAppliedRevision") == first,
    )
    assert condition_of(applied, "Ready")["reason"] == "ReconciliationSucceeded"
    assert condition_of(applied, "Ready")["message"] == f"Applied revision: {first}"
    kept = kube.get(f"{cms}/kept")
    assert kept["data"] == {"value": "1"}
    assert kept["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"] == "team"
    assert kube.exists(f"{cms}/removed")

    second = flux_source.commit(
        {"team/removed.yaml": None, "team/kept.yaml": _config_map(ns, "kept", "2")},
        "team: drop one ConfigMap, change the other",
    )
    flux.wait_ready(
        KUSTOMIZE_API,
        "kustomizations",
        ns,
        "team",
        timeout=120,
        until=lambda k: k["status"].get("lastAppliedRevision") == second,
    )
    assert not kube.exists(f"{cms}/removed")
    assert kube.get(f"{cms}/kept")["data"] == {"value": "2"}


def test_a_kustomization_that_cannot_build_its_path_is_not_ready_and_says_why(
    flux: Flux, flux_source: Any
) -> None:
    ns = flux_source.namespace
    flux_source.commit({"team/cm.yaml": _config_map(ns, "x", "1")}, "team")
    flux.apply(kustomization(ns, "elsewhere", flux_source.name, "./no-such-folder"))

    def failed() -> dict[str, Any] | None:
        k = flux.kube.get(f"/apis/{KUSTOMIZE_API}/namespaces/{ns}/kustomizations/elsewhere")
        ready = condition_of(k, "Ready")
        return k if ready.get("status") == "False" and "path" in ready["message"] else None

    k = wait_for(failed, 60, what="Kustomization elsewhere Ready=False")
    ready = condition_of(k, "Ready")
    assert ready["reason"] == "ArtifactFailed"
    assert ready["message"].startswith("kustomization path not found")
    assert "no-such-folder" in ready["message"]
    assert not flux.kube.exists(f"/api/v1/namespaces/{ns}/configmaps/x")


GROUP = {"apiVersion": "gitea.bpg.pw/v1alpha1", "kind": "RunnerGroup"}


def _group(name: str, generation: int, observed: int, *conditions: dict[str, str]) -> dict:
    return {
        **GROUP,
        "metadata": {"name": name, "namespace": "team", "generation": generation},
        "status": {"observedGeneration": observed, "conditions": list(conditions)},
    }


def test_kstatus_reads_current_in_progress_and_failed_from_the_conditions(
    kstatus_bin: Path,
) -> None:
    ready = {"type": "Ready", "status": "True", "reason": "Ready", "message": "2 runners"}
    not_ready = {"type": "Ready", "status": "False", "reason": "Pending", "message": "rolling"}
    reconciling = {
        "type": "Reconciling",
        "status": "True",
        "reason": "Progressing",
        "message": "applying generation 3",
    }
    stalled = {
        "type": "Stalled",
        "status": "True",
        "reason": "InvalidSpec",
        "message": "spec.scope.org is required",
    }
    invalid = {**not_ready, "reason": "InvalidSpec", "message": "spec.scope.org is required"}
    healthy, rolling, broken, stale, unflagged = kstatus(
        _group("healthy", 2, 2, ready),
        _group("rolling", 3, 3, not_ready, reconciling),
        _group("broken", 4, 4, invalid, stalled),
        _group("stale", 5, 4, ready),
        _group("unflagged", 4, 4, invalid),
        exe=kstatus_bin,
    )
    assert (healthy["status"], healthy["name"]) == ("Current", "healthy")
    assert healthy["message"] == "Resource is Ready"
    assert rolling["status"] == "InProgress"
    assert rolling["message"] == "applying generation 3"
    assert broken["status"] == "Failed"
    assert broken["message"] == "spec.scope.org is required"
    # Ready=True is not enough: a generation the controller has not seen yet is in progress.
    assert stale["status"] == "InProgress"
    # Ready=False alone cannot tell broken from slow: without Stalled=True it reads as
    # InProgress, so a Kustomization waiting on it runs into its timeout (issue 37).
    assert unflagged["status"] == "InProgress"
