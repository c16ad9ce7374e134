"""Issue 37: a team's whole namespace managed by Flux, pruned by one commit.

The team's folder holds its Namespace, tokens Secret, Role, RoleBinding (lending the operator
the Secret) and RunnerGroup, applied by a Kustomization with ``wait`` and ``prune``. A commit
that removes the folder makes Flux delete the Namespace, and with it the Secret and the
RoleBinding in the same breath as the group, while a runner of that group is busy: the group's
finalizer must still let the namespace go within ``drainTimeout`` + 30 s, and no registration
of the group may be left in Gitea.

The group's ``terminationGracePeriod`` is its ``drainTimeout``: the namespace controller looks
again only after half the largest grace period of the Pods it deleted (or at its 5-minute
resync), so with the default of 1h the namespace stayed Terminating, empty, for minutes after
the finalizer went (docs/gitops.md).
"""

from __future__ import annotations

import time
from typing import Any

import yaml

from tests.support.launcher import OPERATOR_NS, OPERATOR_SA
from tests.support.testbed import (
    CREDENTIALS,
    GROUPS,
    delete_namespace,
    runner_group,
    runner_jobs,
    unique,
)
from tests.testbed.gitops import KUSTOMIZE_API, Flux, kustomization
from tests.testbed.kube import KubeClient, wait_for

DRAIN_SECONDS = 30
WORKFLOW = """\
name: busy
on: [push]
jobs:
  busy:
    runs-on: gro-prune
    steps:
      - run: sleep 120
"""


def _folder(ns: str, group: dict[str, Any], cluster: Any, target: Any) -> dict[str, str | None]:
    """The team's folder, one file per object, as a platform team would keep it."""
    objects = {
        "namespace": {
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns,
                         "labels": {"pod-security.kubernetes.io/enforce": "privileged"}},
        },
        "secret": {
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "tokens", "namespace": ns, "labels": CREDENTIALS},
            "stringData": {"registration": target.registration_token, "api": cluster.gitea_token},
        },
        "role": {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "runner-tokens", "namespace": ns},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["tokens"],
                       "verbs": ["get"]}],
        },
        "rolebinding": {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "runner-tokens", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": "runner-tokens"},
            "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_SA,
                          "namespace": OPERATOR_NS}],
        },
        "group": {**group, "metadata": {**group["metadata"], "namespace": ns}},
    }  # fmt: skip
    return {f"teams/{ns}/{k}.yaml": yaml.safe_dump(v, sort_keys=False) for k, v in objects.items()}


def _what_holds(kube: KubeClient, ns: str) -> str:
    """The namespace's own account of what it still waits for, and our group's finalizers."""
    namespace = kube.get(f"/api/v1/namespaces/{ns}")
    meta = namespace["metadata"]
    managers = [(m.get("manager"), m.get("time")) for m in meta.get("managedFields") or []]
    made = (meta.get("creationTimestamp"), meta.get("deletionTimestamp"), managers)
    status = namespace.get("status") or {}
    conditions = [f"{c['type']}: {c.get('message')}" for c in status.get("conditions") or []
                  if c.get("status") == "True"]  # fmt: skip
    groups = kube.get(GROUPS.format(ns=ns))["items"]
    pods = [
        (p["metadata"]["name"], p["status"].get("phase"), p["metadata"].get("finalizers"))
        for p in kube.get(f"/api/v1/namespaces/{ns}/pods")["items"]
    ]
    jobs = [
        (j["metadata"]["name"], j["metadata"].get("finalizers"))
        for j in kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
    ]
    finalizers = [(g["metadata"]["name"], g["metadata"].get("finalizers")) for g in groups]
    return f"namespace={made} conditions={conditions} groups={finalizers} pods={pods} jobs={jobs}"


def test_a_commit_removing_a_teams_folder_deletes_its_namespace_and_leaves_no_registration(
    flux: Flux,
    flux_source: Any,
    kube: KubeClient,
    gitea: Any,
    cluster: Any,
    gitea_target: Any,
    start_operator: Any,
    kubelet_harness: Any,
) -> None:
    ns, org, repo = unique("team-pruned"), gitea_target.org, gitea_target.repo
    # Secrets read are used for 5 s (default 60): the token has left the operator's memory
    # long before the busy runner drains, as it does with the default when a job runs longer
    # than a minute. Before the last good answer's token was kept for the teardown, the
    # finalizer then went at drainTimeout + 30 s with the registration left in Gitea.
    start_operator(ns, extra=("--secret-cache-ttl", "5"))
    group = runner_group(
        "ci", target=gitea_target, url=cluster.gitea_url, labels=["gro-prune"],
        maxActiveRunners=1, drainTimeout=f"{DRAIN_SECONDS}s",
        terminationGracePeriod=f"{DRAIN_SECONDS}s",
    )  # fmt: skip
    folder = _folder(ns, group, cluster, gitea_target)
    try:
        first = flux_source.commit({**folder, "teams/README.md": "teams\n"}, "team joins")
        flux.apply(
            kustomization(flux_source.namespace, "teams", flux_source.name, "./teams", timeout="3m")
        )
        flux.wait_ready(
            KUSTOMIZE_API, "kustomizations", flux_source.namespace, "teams", timeout=180,
            until=lambda k: k["status"].get("lastAppliedRevision") == first,
        )  # fmt: skip

        # a runner of the group is busy when the namespace goes
        gitea.push_workflow(org, repo, "busy.yml", WORKFLOW)

        def busy() -> list[str] | None:
            jobs = gitea.list_jobs("repo", org, repo, status=None)
            return [j["runner_name"] for j in jobs if j["status"] == "in_progress"] or None

        (runner,) = wait_for(busy, 180, what="the job running on a runner of the group")
        assert runner.startswith("ci-"), runner
        assert runner_jobs(kube, ns, "ci")

        started = time.monotonic()
        print(f"\nteam leaves at {time.strftime('%H:%M:%S')}", flush=True)
        flux_source.commit(dict.fromkeys(folder), "team leaves")
        bound = DRAIN_SECONDS + 30
        try:
            wait_for(lambda: not kube.exists(f"/api/v1/namespaces/{ns}"), bound, what="gone")
        except TimeoutError:
            # what holds it at the bound; then whether it goes at all
            held = _what_holds(kube, ns)
            print(f"\nat {bound} s the namespace still waits: {held}", flush=True)
            try:
                wait_for(lambda: not kube.exists(f"/api/v1/namespaces/{ns}"), 120, what="gone")
                late = f"gone {time.monotonic() - started:.1f} s after the commit"
            except TimeoutError:
                late = (
                    f"still there after {time.monotonic() - started:.1f} s: {_what_holds(kube, ns)}"
                )
            raise AssertionError(f"not gone within {bound} s: {held}; {late}") from None
        took = time.monotonic() - started
        print(f"\nnamespace pruned: gone {took:.1f} s after the commit (bound {bound} s)")
        left = [r["name"] for r in gitea.list_runners("org", owner=org)]
        assert not [n for n in left if n.startswith("ci-")], left
        assert kubelet_harness.errors == []
    finally:
        if kube.exists(f"/api/v1/namespaces/{ns}"):
            delete_namespace(kube, ns)
