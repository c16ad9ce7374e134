"""Issue 37: a team's RunnerGroup managed by a real Flux (source-controller and
kustomize-controller v1.9.6, built by the testbed) from a Git repository on the testbed's
Gitea, served by the real operator, with runner Pods started by the kubelet harness.

What a platform engineer relies on: a Kustomization with ``wait: true`` turns Ready once the
group is Ready (kstatus reads the operator's conditions), and a real workflow runs; a broken
commit fails the Kustomization quickly, long before its timeout (Flux fails early on a
Stalled resource and names it; the operator's words are in the group's Stalled condition);
the operator owns no field Flux applies, so a dry-run apply of the same manifest changes
nothing; a commit that removes the group prunes it, its finalizer released and no
registration left in Gitea.
"""

from __future__ import annotations

import time
from typing import Any

import yaml

from tests.support.testbed import GROUPS, condition, group_status, make_tokens, runner_group
from tests.testbed.gitops import KUSTOMIZE_API, Flux, condition_of, kstatus, kustomization
from tests.testbed.kube import KubeClient, wait_for

WORKFLOW = """\
name: gitops
on: [push]
jobs:
  hello:
    runs-on: gro-gitops
    steps:
      - run: echo "hello from a runner of a group Flux applied"
"""
# The Kustomization's own deadline: a broken group must fail it long before this.
TIMEOUT = "4m"


def _manifest(group: dict[str, Any], ns: str) -> str:
    group["metadata"]["namespace"] = ns
    return yaml.safe_dump(group, sort_keys=False)


def _applied(flux: Flux, ns: str, revision: str, timeout: float) -> dict[str, Any]:
    return flux.wait_ready(
        KUSTOMIZE_API,
        "kustomizations",
        ns,
        "teams",
        timeout=timeout,
        until=lambda k: k["status"].get("lastAppliedRevision") == revision,
    )


def test_a_group_no_operator_has_answered_for_is_in_progress_not_current(
    kube: KubeClient, kstatus_bin: Any, team_namespace: str, gitea_target: Any, cluster: Any
) -> None:
    """The gap a full CI run showed: Flux applied a group and called it Ready before the
    operator's first status write, because kstatus calls a custom resource without
    ``status.observedGeneration`` Current. The CRD's default status closes it for every
    GitOps tool: no operator runs here, and the group still reads as in progress."""
    created = kube.post(
        GROUPS.format(ns=team_namespace),
        runner_group("fresh", target=gitea_target, url=cluster.gitea_url, labels=["x"]),
    )
    stored = kube.get(f"{GROUPS.format(ns=team_namespace)}/fresh")
    assert created["status"] == stored["status"] == {"observedGeneration": 0}
    (read,) = kstatus(stored, exe=kstatus_bin)
    assert read["status"] == "InProgress", read
    assert "latest observed generation is 0" in read["message"], read


def test_a_groups_kustomization_is_ready_with_it_fails_fast_when_broken_and_prunes_it(
    flux: Flux,
    flux_source: Any,
    kube: KubeClient,
    gitea: Any,
    cluster: Any,
    team_namespace: str,
    gitea_target: Any,
    start_operator: Any,
    kubelet_harness: Any,
) -> None:
    ns, org, repo = team_namespace, gitea_target.org, gitea_target.repo
    make_tokens(kube, ns, cluster, gitea_target)
    start_operator(ns)
    group = runner_group(
        "ci", target=gitea_target, url=cluster.gitea_url, labels=["gro-gitops"],
        maxActiveRunners=2, drainTimeout="30s",
    )  # fmt: skip
    path = f"{GROUPS.format(ns=ns)}/ci"
    # the folder the Kustomization applies holds the team's folder: removing the team's
    # folder prunes it (removing the applied folder itself would fail "path not found")
    first = flux_source.commit({"teams/a/group.yaml": _manifest(group, ns)}, "team a: ci")
    flux.apply(
        kustomization(flux_source.namespace, "teams", flux_source.name, "./teams", timeout=TIMEOUT)
    )

    # Ready once the group is Ready, and not before: wait: true reads the group through kstatus
    applied = _applied(flux, flux_source.namespace, first, timeout=180)
    ready = condition(group_status(kube, ns, "ci"), "Ready")
    assert ready["status"] == "True", group_status(kube, ns, "ci")
    assert condition_of(applied, "Ready")["reason"] == "ReconciliationSucceeded"

    # a real workflow runs on a runner of that group
    gitea.push_workflow(org, repo, "gitops.yml", WORKFLOW)

    def concluded() -> list[Any] | None:
        jobs = gitea.list_jobs("repo", org, repo, status=None)
        done = [(j["status"], j.get("conclusion")) for j in jobs]
        return done if done and all(s == "completed" for s, _ in done) else None

    assert wait_for(concluded, 180, what="the workflow job") == [("completed", "success")]
    assert kubelet_harness.errors == []

    # the operator owns no field that Flux applies: only kustomize-controller holds spec
    live = kube.get(path)
    for entry in live["metadata"]["managedFields"]:
        if entry["manager"] != "kustomize-controller":
            assert "f:spec" not in (entry.get("fieldsV1") or {}), entry["manager"]
    # and a server-side dry-run apply of the same manifest changes nothing
    dry = kube.request(
        "PATCH",
        path,
        yaml.safe_load(_manifest(group, ns)),
        content_type="application/apply-patch+yaml",
        query={"fieldManager": "kustomize-controller", "dryRun": "All"},
    )
    assert dry["metadata"]["generation"] == live["metadata"]["generation"]
    assert dry["spec"] == live["spec"]

    # a broken commit fails the Kustomization quickly, in the operator's words
    broken = {**group, "spec": {**group["spec"], "labels": ["gro-gitops:host:extra"]}}
    started = time.monotonic()
    flux_source.commit({"teams/a/group.yaml": _manifest(broken, ns)}, "team a: a typo")

    def failed() -> dict[str, Any] | None:
        k = kube.get(
            f"/apis/{KUSTOMIZE_API}/namespaces/{flux_source.namespace}/kustomizations/teams"
        )
        cond = condition_of(k, "Ready")
        failing = cond.get("status") == "False" and cond.get("reason") == "HealthCheckFailed"
        return k if failing and f"RunnerGroup/{ns}/ci" in cond.get("message", "") else None

    try:
        k = wait_for(failed, 150, what="the Kustomization failed with the group's message")
    except TimeoutError:
        kz = f"/apis/{KUSTOMIZE_API}/namespaces/{flux_source.namespace}/kustomizations/teams"
        raise AssertionError(
            f"Kustomization: {kube.get(kz).get('status')}\ngroup: {kube.get(path)}"
        ) from None
    took = time.monotonic() - started
    message = condition_of(k, "Ready")["message"]
    print(f"\nbroken commit: Kustomization Ready=False after {took:.1f} s: {message}")
    # Flux fails early on a Stalled resource and names it; the words are the group's own
    assert "failed early due to stalled resources" in message and "'Failed'" in message
    stalled = condition(group_status(kube, ns, "ci"), "Stalled")
    print(f"the group's Stalled condition: {stalled['reason']}: {stalled['message']}")
    assert stalled["status"] == "True" and "takes no argument" in stalled["message"]

    # fixed again, then removed from Git: pruned, finalizer released, no registration left
    fixed = flux_source.commit({"teams/a/group.yaml": _manifest(group, ns)}, "team a: fixed")
    _applied(flux, flux_source.namespace, fixed, timeout=180)
    flux_source.commit(
        {"teams/a/group.yaml": None, "teams/README.md": "teams' folders\n"}, "team a leaves"
    )
    started = time.monotonic()
    wait_for(lambda: not kube.exists(path), 30 + 30, what="the group pruned and released")
    print(f"pruned: the group was gone {time.monotonic() - started:.1f} s after the commit")
    runners = [r["name"] for r in gitea.list_runners("org", owner=org)]
    assert not [name for name in runners if name.startswith("ci-")], runners
