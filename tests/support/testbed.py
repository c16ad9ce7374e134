"""Helpers for tests against the testbed: namespaces and Secrets prepared as a team prepares
them, RunnerGroups, Gitea targets, and readers of what a user sees (status, conditions, runner
Jobs, Events, /metrics, ``why``). The fixtures built on them are in ``fixtures.py``."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import manifests
from tests.support.builders import group_object
from tests.support.launcher import OPERATOR_NS, OPERATOR_SA
from tests.testbed.kube import KubeClient, KubeError, wait_for
from tests.testbed.kubelet_harness import runner_binary

GROUPS = "/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups"


# A runner image whose tag tells the testbed's kwok how long the "runner" Pod runs before
# it completes (see tests/testbed/kwok/pod-complete.yaml). kwok pulls no image.
def kwok_image(seconds: int) -> str:
    return f"kwok.invalid/act_runner:complete-after-{seconds}s"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def delete_namespace(kube: KubeClient, ns: str) -> None:
    """Delete a test namespace without waiting for an operator that has already stopped:
    the groups' teardown finalizers are dropped first (tests of the teardown itself wait
    for it explicitly)."""
    with contextlib.suppress(Exception):
        for group in kube.get(GROUPS.format(ns=ns))["items"]:
            name = group["metadata"]["name"]
            kube.patch(f"{GROUPS.format(ns=ns)}/{name}", {"metadata": {"finalizers": None}})
    kube.delete(f"/api/v1/namespaces/{ns}")


def bind_operator(kube: KubeClient, ns: str, cluster_role: str, kind: str = "ClusterRole") -> None:
    """Bind one of the operator's ClusterRoles (or a Role of ``ns``) to its ServiceAccount
    in ``ns``, as a team does to grant the operator what that role allows there."""
    manifests.apply(
        kube,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": cluster_role},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": kind,
                "name": cluster_role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_SA, "namespace": OPERATOR_NS}],
        },
        namespace=ns,
    )


def allow_secrets(kube: KubeClient, ns: str) -> None:
    bind_operator(kube, ns, "gitea-runner-operator-secrets")


MEMBERSHIP_ROLE = "gitea-runner-operator-membership"


def allow_leases(kube: KubeClient, ns: str, verbs: list[str]) -> None:
    """A Role and RoleBinding letting the operator use Leases in ``ns`` with ``verbs``:
    ``--sharding`` needs ``list`` and ``delete`` beyond the leader's get, create and update,
    which manifests/rbac.yaml does not grant yet (issue 38)."""
    rules = [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": verbs}]
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "rules": rules}
    manifests.apply(kube, {**role, "metadata": {"name": MEMBERSHIP_ROLE}}, namespace=ns)
    bind_operator(kube, ns, MEMBERSHIP_ROLE, kind="Role")


@dataclass
class GiteaTarget:
    org: str
    repo: str
    registration_token: str


def make_namespace(kube: KubeClient, name: str, *, privileged: bool = True) -> str:
    """A namespace; runner Pods are privileged (DinD), so Pod Security must admit them."""
    labels = {"pod-security.kubernetes.io/enforce": "privileged"} if privileged else {}
    manifests.apply(
        kube,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
    )
    return name


def make_tokens(kube: KubeClient, ns: str, cluster: Any, target: GiteaTarget) -> None:
    """The Secret "tokens": the scope's registration token and the admin API token."""
    make_secret(
        kube, ns, "tokens", {"registration": target.registration_token, "api": cluster.gitea_token}
    )


def register_runner(cluster: Any, target: GiteaTarget, name: str, labels: str, cwd: Path) -> None:
    """Register an ephemeral runner the way a runner Pod does, with the testbed's runner."""
    subprocess.run(
        [str(runner_binary()), "register", "--no-interactive", "--ephemeral",
         "--instance", cluster.gitea_url, "--token", target.registration_token,
         "--name", name, "--labels", labels],
        cwd=cwd, check=True, capture_output=True, timeout=60,
    )  # fmt: skip


CREDENTIALS = {"gitea.bpg.pw/credentials": "true"}


def make_secret(
    kube: KubeClient,
    ns: str,
    name: str,
    data: dict[str, str],
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> None:
    """A Secret that opts in to being used by the operator, unless ``labels`` says
    otherwise."""
    manifests.apply(
        kube,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "labels": CREDENTIALS if labels is None else labels,
                "annotations": annotations or {},
            },
            "type": "Opaque",
            "stringData": data,
        },
        namespace=ns,
    )


def runner_group(name: str, *, target: GiteaTarget, url: str, **spec: Any) -> dict[str, Any]:
    body = {
        "scope": "org",
        "org": target.org,
        "gitea": {"url": url},
        "labels": ["gro-linux"],
        "maxActiveRunners": 2,
        "registrationToken": {"secretRef": {"name": "tokens", "key": "registration"}},
        "authToken": {"secretRef": {"name": "tokens", "key": "api"}},
        "pollInterval": "5s",
    }
    body.update(spec)
    return group_object(name, body)


@dataclass(frozen=True)
class Team:
    """One team's setup, as the scenarios share it (fixture ``team``): its namespace, whose
    Secrets the operator may read, its Gitea organisation and repository, and the Secret
    "tokens" (:func:`make_tokens`) that its groups name."""

    kube: KubeClient
    gitea_url: str
    ns: str
    target: GiteaTarget

    @property
    def org(self) -> str:
        return self.target.org

    @property
    def repo(self) -> str:
        return self.target.repo

    def group(self, name: str, *, url: str | None = None, **spec: Any) -> dict[str, Any]:
        """A RunnerGroup of the team's organisation (:func:`runner_group`), on the testbed's
        Gitea unless ``url`` says otherwise, applied in the team's namespace."""
        obj = runner_group(name, target=self.target, url=url or self.gitea_url, **spec)
        manifests.apply(self.kube, obj, namespace=self.ns)
        return obj


def group_uid(kube: KubeClient, ns: str, name: str) -> str:
    return str(kube.get(f"{GROUPS.format(ns=ns)}/{name}")["metadata"]["uid"])


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), {})


def runner_jobs(kube: KubeClient, ns: str, group: str) -> list[dict[str, Any]]:
    selector = f"gitea.bpg.pw/runnergroup-name={group}"
    return kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs", labelSelector=selector)["items"]


def job_done(job: dict[str, Any]) -> bool:
    return any(
        c["type"] in ("Complete", "Failed") and c["status"] == "True"
        for c in job.get("status", {}).get("conditions", [])
    )


def group_status(kube: KubeClient, ns: str, name: str) -> dict[str, Any]:
    return kube.get(f"{GROUPS.format(ns=ns)}/{name}").get("status") or {}


def ready(status: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == "Ready"), {})


def wait_until(predicate: Callable[[], Any], timeout: float = 60, what: str = "condition") -> Any:
    return wait_for(predicate, timeout=timeout, interval=0.5, what=what)


def sample(duration: float, probe: Callable[[], Any], interval: float = 0.5) -> list[Any]:
    """Probe repeatedly for a while: for assertions about what must *never* happen."""
    seen = []
    end = time.monotonic() + duration
    while time.monotonic() < end:
        seen.append(probe())
        time.sleep(interval)
    return seen


def events(kube: Any, ns: str) -> list[dict[str, Any]]:
    """The namespace's Events about RunnerGroups."""
    return [
        e
        for e in kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
        if e["involvedObject"]["kind"] == "RunnerGroup"
    ]


def metrics(port: int) -> str:
    """The operator's /metrics text."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return str(resp.read().decode())


def why(cluster: Any, ns: str, job_url: str) -> str:
    """The command a user runs, as a user runs it: the admin's kubeconfig, a Gitea token."""
    done = subprocess.run(
        [sys.executable, "-m", "gitea_runner_operator", "why", job_url,
         "--token", cluster.gitea_token, "--kubeconfig", str(cluster.kubeconfig),
         "--namespace", ns],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def rejection(kube: KubeClient, ns: str, obj: dict[str, Any]) -> str:
    with pytest.raises(KubeError) as err:
        kube.post(GROUPS.format(ns=ns), obj)
    assert err.value.status == 422, err.value
    return api_message(err.value)


def api_message(error: KubeError) -> str:
    """The API server's own message (the Status object's), not our client's summary."""
    return str(json.loads(error.body)["message"])


ONE_JOB = """\
name: one
on: [push]
jobs:
  build:
    runs-on: gro-linux
    steps: [{run: echo build}]
"""


def namespace_with_access(kube: KubeClient, name: str, labels: dict[str, str]) -> str:
    manifests.apply(
        kube,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
    )
    allow_secrets(kube, name)
    return name


def registered(gitea: Any, org: str) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in gitea.list_runners("org", owner=org)}


def start_daemon(cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(runner_binary()), "daemon"],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def allow_cache(kube: KubeClient, ns: str) -> None:
    """What a team does to use spec.cache: bind the -cache ClusterRole in its namespace."""
    bind_operator(kube, ns, "gitea-runner-operator-cache")
