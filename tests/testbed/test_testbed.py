"""Smoke tests of the testbed itself: the peers behave as the operator's tests assume.

Why: if a version bump changes kwok stages, Gitea's job listing or the runner
protocol, these fail first and say which peer moved, instead of the operator's
tests failing in confusing ways.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest

from .gitea_api import GiteaAPI
from .kube import KubeClient, KubeError, wait_for
from .kubelet_harness import KubeletHarness
from .pytest_plugin import RepoRef
from .sandbox import Sandbox

pytestmark = pytest.mark.integration

WORKFLOW = """\
on: [push]
jobs:
  build:
    runs-on: [self-hosted, linux]
    steps:
      - run: echo "hello from $GITHUB_REPOSITORY"
  after:
    needs: build
    runs-on: [self-hosted, linux]
    steps:
      - run: echo after
"""


def _job(
    name: str, annotations: dict[str, str] | None = None, env: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": 2,
            "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "runner", "image": "gitea/act_runner:latest", "env": env or []}
                    ],
                },
            },
        },
    }


def test_kwok_job_completes_after_annotated_delay(kube: KubeClient, kube_namespace: str) -> None:
    ns = kube_namespace
    t0 = time.monotonic()
    kube.post(
        f"/apis/batch/v1/namespaces/{ns}/jobs",
        _job("slow", {"pod-complete.stage.kwok.x-k8s.io/delay": "4s"}),
    )
    pod = wait_for(
        lambda: [
            p
            for p in kube.get(f"/api/v1/namespaces/{ns}/pods", labelSelector="job-name=slow")[
                "items"
            ]
            if p["status"].get("phase") == "Running"
        ],
        20,
        what="pod Running",
    )[0]
    assert pod["spec"]["nodeName"] == "kwok-node-0"
    wait_for(
        lambda: kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs/slow")["status"].get("succeeded"),
        30,
        what="Job succeeded",
    )
    assert time.monotonic() - t0 >= 4
    # ttl-after-finished controller, then the garbage collector removes the pods
    wait_for(
        lambda: not kube.exists(f"/apis/batch/v1/namespaces/{ns}/jobs/slow"),
        30,
        what="TTL deletion",
    )
    wait_for(
        lambda: (
            not kube.get(f"/api/v1/namespaces/{ns}/pods", labelSelector="job-name=slow")["items"]
        ),
        30,
        what="pods garbage-collected",
    )


def test_kwok_delay_from_image_tag(kube: KubeClient, kube_namespace: str) -> None:
    """An image tag complete-after-<d> sets the run time; the annotation wins over it."""
    ns = kube_namespace
    tagged = _job("tagged")
    tagged["spec"]["template"]["spec"]["containers"][0]["image"] = "x.invalid/r:complete-after-5s"
    both = _job("both", {"pod-complete.stage.kwok.x-k8s.io/delay": "1s"})
    both["spec"]["template"]["spec"]["containers"][0]["image"] = "kwok.invalid/r:complete-after-60s"
    t0 = time.monotonic()
    for job in (tagged, both):
        kube.post(f"/apis/batch/v1/namespaces/{ns}/jobs", job)
    done: dict[str, float] = {}

    def finished() -> bool:
        for name in {"tagged", "both"} - set(done):
            st = kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}")["status"]
            if st.get("succeeded"):
                done[name] = time.monotonic() - t0
        return len(done) == 2

    wait_for(finished, 40, what="both Jobs succeeded")
    assert done["tagged"] >= 5
    assert done["both"] < 5


def test_service_account_token_kubeconfig(
    testbed: Sandbox, kube: KubeClient, kube_namespace: str
) -> None:
    ns = kube_namespace
    kube.post(f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "op"}})
    token = kube.create_token(ns, "op")
    as_sa = testbed.kube_client(token)
    with pytest.raises(KubeError) as e:
        as_sa.get(f"/api/v1/namespaces/{ns}/pods")
    assert e.value.status == 403
    kube.post(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        {
            "metadata": {"name": "pods"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
        },
    )
    kube.post(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
        {
            "metadata": {"name": "pods"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pods"},
            "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": ns}],
        },
    )
    wait_for(lambda: as_sa.get(f"/api/v1/namespaces/{ns}/pods") is not None, 10, what="RBAC grant")
    # the serviceaccount-token controller fills legacy token Secrets
    kube.post(
        f"/api/v1/namespaces/{ns}/secrets",
        {
            "metadata": {
                "name": "op-token",
                "annotations": {"kubernetes.io/service-account.name": "op"},
            },
            "type": "kubernetes.io/service-account-token",
        },
    )
    secret = wait_for(
        lambda: (
            (s := kube.get(f"/api/v1/namespaces/{ns}/secrets/op-token"))
            .get("data", {})
            .get("token")
            and s
        ),
        30,
        what="token Secret filled",
    )
    legacy = base64.b64decode(secret["data"]["token"]).decode()
    assert testbed.kube_client(legacy).get(f"/api/v1/namespaces/{ns}/pods") is not None
    kc = json.loads(testbed.kubeconfig_for_token(token, namespace=ns).read_text())
    assert kc["users"][0]["user"]["token"] == token
    assert kc["contexts"][0]["context"]["namespace"] == ns


def test_gitea_lists_runnable_jobs_as_queued_and_blocked_as_waiting(
    gitea: GiteaAPI, gitea_repo: RepoRef
) -> None:
    gitea.push_workflow(gitea_repo.owner, gitea_repo.name, "ci", WORKFLOW)
    queued = gitea.wait_for_jobs(gitea_repo.owner, gitea_repo.name, "queued", 1)
    assert [(j["name"], j["labels"]) for j in queued] == [("build", ["self-hosted", "linux"])]
    waiting = gitea.list_jobs("repo", gitea_repo.owner, gitea_repo.name, status="waiting")
    assert [j["name"] for j in waiting] == ["after"]
    assert queued[0]["id"] in {j["id"] for j in gitea.list_jobs("org", gitea_repo.owner)}
    assert queued[0]["id"] in {j["id"] for j in gitea.list_jobs("admin")}


@pytest.mark.e2e
def test_harness_runs_runner_pod_to_completion(
    testbed: Sandbox,
    kube: KubeClient,
    kube_namespace: str,
    gitea: GiteaAPI,
    gitea_repo: RepoRef,
    kubelet_harness: KubeletHarness,
) -> None:
    owner, repo = gitea_repo
    gitea.push_workflow(owner, repo, "ci", WORKFLOW)
    first = gitea.wait_for_jobs(owner, repo, "queued", 1)[0]
    ns = kube_namespace
    kube.post(
        f"/api/v1/namespaces/{ns}/secrets",
        {
            "metadata": {"name": "reg"},
            "stringData": {"token": gitea.registration_token("org", owner)},
        },
    )
    env: list[dict[str, Any]] = [
        {"name": "GITEA_INSTANCE_URL", "value": testbed.gitea_url},
        {
            "name": "GITEA_RUNNER_REGISTRATION_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "reg", "key": "token"}},
        },
        {"name": "GITEA_RUNNER_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "GITEA_RUNNER_LABELS", "value": "self-hosted:docker://node:20,linux"},
        {"name": "GITEA_RUNNER_EPHEMERAL", "value": "1"},
    ]
    kube.post(f"/apis/batch/v1/namespaces/{ns}/jobs", _job("runner", env=env))
    wait_for(
        lambda: kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs/runner")["status"].get("succeeded"),
        60,
        what="runner Job succeeded",
    )
    done = gitea.wait_for_job_status(owner, repo, first["id"], "completed", 30)
    assert done["conclusion"] == "success"
    assert done["runner_name"].startswith("runner-")
    # the ephemeral registration is gone once its one task ended
    assert not [r for r in gitea.list_runners("org", owner) if r["name"] == done["runner_name"]]
    assert kubelet_harness.errors == []


def test_harness_env_resolution(kube: KubeClient, kube_namespace: str) -> None:
    from .kubelet_harness import host_mode_labels, read_mounted_file, resolve_env

    ns = kube_namespace
    kube.post(
        f"/api/v1/namespaces/{ns}/secrets", {"metadata": {"name": "s"}, "stringData": {"t": "tok"}}
    )
    kube.post(
        f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "c"}, "data": {"A": "a"}}
    )
    container: dict[str, Any] = {
        "name": "runner",
        "envFrom": [{"configMapRef": {"name": "c"}, "prefix": "CM_"}],
        "env": [
            {"name": "X", "value": "x"},
            {"name": "Y", "value": "$(X)-y"},
            {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "t"}}},
            {"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {
                "name": "O",
                "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": True}},
            },
        ],
        "volumeMounts": [{"name": "reg", "mountPath": "/var/run/reg"}],
    }
    pod = {
        "metadata": {"name": "p-1", "namespace": ns, "uid": "u"},
        "spec": {
            "containers": [container],
            "volumes": [{"name": "reg", "secret": {"secretName": "s"}}],
        },
    }
    env = resolve_env(kube, pod, container)
    assert env == {"CM_A": "a", "X": "x", "Y": "x-y", "S": "tok", "N": "p-1"}
    assert read_mounted_file(kube, pod, container, "/var/run/reg/t") == "tok"
    assert (
        host_mode_labels("ubuntu:docker://node:20, linux,x:host") == "ubuntu:host,linux:host,x:host"
    )
