"""What the real-node install suite (test_real_node_install.py) does as a user would: Helm
with the testbed's helm binary and the admin kubeconfig, the operator's Pods and Lease as
``kubectl`` shows them, and a team's Gitea organisation and namespace set up the way the
README tells a user (Secret, Role and RoleBinding, RunnerGroup)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support import manifests
from tests.support.testbed import GROUPS, runner_jobs, unique, wait_until
from tests.testbed import images
from tests.testbed.kube import KubeError
from tests.testbed.realnode import NODE_LABEL

CHART = manifests.REPO / "charts" / "gitea-runner-operator"
LEASE = "gitea-runner-operator"
TOLERATION = {"key": NODE_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
RUNNER_IMAGE = "docker.io/" + images.RUNNER


def step(name: str, t0: float) -> float:
    """Print a step's time (never asserted: the machine is shared)."""
    took = time.monotonic() - t0
    print(f"\n[install suite] {name}: {took:.1f}s", flush=True)
    return took


@dataclass
class Install:
    """One Helm release of the chart and one team using it."""

    kube: Any
    helm_bin: Path
    kubeconfig: Path
    workdir: Path
    release: str
    namespace: str
    gitea: Any
    gitea_url: str  # as Pods reach it
    node: Any  # the real node (tests.testbed.realnode.RealNode)
    org: str = ""
    repo: str = "app"
    team: str = ""
    times: dict[str, float] = field(default_factory=dict)

    # ---------------------------------------------------------------- helm
    def helm(self, *args: str, timeout: float = 600) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HELM_", "KUBECONFIG"))}
        for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
            env[var] = str(self.workdir / var.lower())
        argv = [str(self.helm_bin), "--kubeconfig", str(self.kubeconfig), *args]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc.stdout

    def kubectl(self, *args: str) -> str:
        argv = ["kubectl", "--kubeconfig", str(self.kubeconfig), *args]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{proc.stderr}")
        return proc.stdout

    def values(self, **values: Any) -> str:
        path = self.workdir / f"values-{len(list(self.workdir.glob('values-*')))}.yaml"
        path.write_text(yaml.safe_dump(values))
        return str(path)

    @property
    def fullname(self) -> str:
        return f"{self.release}-gitea-runner-operator"

    # ---------------------------------------------------------------- operator Pods
    def pods(self) -> list[dict[str, Any]]:
        selector = f"app.kubernetes.io/instance={self.release}"
        items = self.kube.get(f"/api/v1/namespaces/{self.namespace}/pods", labelSelector=selector)
        return list(items["items"])

    def ready_pods(self, image: str | None = None) -> list[str]:
        """Names of operator Pods that are Ready (and not being deleted), of ``image``."""
        names = []
        for p in self.pods():
            if p["metadata"].get("deletionTimestamp"):
                continue
            if image and p["spec"]["containers"][0]["image"] != image:
                continue
            conds = (p.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conds):
                names.append(p["metadata"]["name"])
        return sorted(names)

    def wait_rolled(self, replicas: int, image: str | None = None, timeout: float = 240) -> None:
        """Exactly ``replicas`` operator Pods, all Ready (of ``image``), none other left."""
        self.wait(
            lambda: len(self.ready_pods(image)) == replicas == len(self.pods()),
            f"{replicas} operator Pod(s) Ready ({image or 'any image'})",
            timeout,
        )

    def lease(self) -> dict[str, Any]:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{LEASE}"
        try:
            return dict(self.kube.get(path).get("spec") or {})
        except KubeError as exc:
            if exc.status == 404:  # not taken yet
                return {}
            raise

    def holder(self) -> str:
        """The Lease's holder: Pod name and a per-process suffix ('' when nobody holds it)."""
        return str(self.lease().get("holderIdentity") or "")

    def leader(self) -> str:
        """The leader's Pod name ('' when nobody holds the Lease)."""
        return self.holder().rsplit("_", 1)[0]

    def delete_pod(self, name: str, grace: int | None = None) -> None:
        body = {"gracePeriodSeconds": grace} if grace is not None else None
        self.kube.delete(f"/api/v1/namespaces/{self.namespace}/pods/{name}", body)

    def pod_gone(self, name: str) -> bool:
        return not self.kube.exists(f"/api/v1/namespaces/{self.namespace}/pods/{name}")

    def container_id(self, pod: str) -> str:
        status = self.kube.get(f"/api/v1/namespaces/{self.namespace}/pods/{pod}")["status"]
        return str(status["containerStatuses"][0]["containerID"]).split("://", 1)[1]

    # ---------------------------------------------------------------- the team
    def setup_team(self) -> None:
        """Gitea organisation and repository; the team namespace with the README's Secret,
        Role and RoleBinding."""
        self.org = unique("org")
        self.gitea.create_org(self.org)
        self.gitea.create_repo(self.org, self.repo)
        token = self.gitea.registration_token("org", owner=self.org)
        self.team = unique("team")
        ns = self.team
        manifests.apply(
            self.kube, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        )
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "gitea-tokens", "labels": {"gitea.bpg.pw/credentials": "true"}},
            "stringData": {"registration-token": token, "api-token": self.gitea.token},
        }
        role = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "gitea-runner-operator-tokens"},
            "rules": [
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                 "resourceNames": ["gitea-tokens"]}
            ],
        }  # fmt: skip
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "gitea-runner-operator-tokens"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": "gitea-runner-operator-tokens"},
            "subjects": [{"kind": "ServiceAccount", "name": self.fullname,
                          "namespace": self.namespace}],
        }  # fmt: skip
        for obj in (secret, role, binding):
            manifests.apply(self.kube, obj, namespace=ns)

    def group(self, name: str, **spec: Any) -> str:
        """A host-mode RunnerGroup whose label is its own name (each step counts its own
        runners); its runner Pods go to the real node."""
        label = f"gro-install-{name}"
        body = {
            "apiVersion": "gitea.bpg.pw/v1alpha1",
            "kind": "RunnerGroup",
            "metadata": {"name": name},
            "spec": {
                "scope": "org",
                "org": self.org,
                "gitea": {"url": self.gitea_url},
                "labels": [label],
                "mode": "host",
                "image": RUNNER_IMAGE,
                "maxActiveRunners": 2,
                "pollInterval": "5s",
                "registrationToken": {
                    "secretRef": {"name": "gitea-tokens", "key": "registration-token"}
                },
                "authToken": {"secretRef": {"name": "gitea-tokens", "key": "api-token"}},
                "template": {
                    "spec": {
                        "nodeSelector": {NODE_LABEL: "true"},
                        "tolerations": [TOLERATION],
                        "terminationGracePeriodSeconds": 10,
                        "containers": [{"name": "runner", "imagePullPolicy": "Never"}],
                    }
                },
                **spec,
            },
        }
        manifests.apply(self.kube, body, namespace=self.team)
        return label

    def push(self, name: str, label: str, steps: list[str]) -> None:
        """A workflow with one job ``name`` of ``steps`` (shell lines), run once: only the
        push that adds its own file triggers it (each later push would run it again)."""
        workflow = {
            "name": name,
            "on": {"push": {"paths": [f".gitea/workflows/{name}.yml"]}},
            "jobs": {name: {"runs-on": label, "steps": [{"run": s} for s in steps]}},
        }
        self.gitea.push_workflow(self.org, self.repo, f"{name}.yml", yaml.safe_dump(workflow))

    def jobs(self) -> dict[str, dict[str, Any]]:
        found = self.gitea.list_jobs("repo", self.org, self.repo, status=None)
        return {j["name"]: j for j in found}

    def wait_status(self, name: str, status: str, timeout: float = 300) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            job = self.jobs().get(name)
            return job if job and job["status"] == status else None

        try:
            return dict(wait_until(check, timeout=timeout, what=f"job {name} {status}"))
        except TimeoutError:
            raise AssertionError(f"job {name} not {status}: {self.report()}") from None

    def conclusion(self, name: str, timeout: float = 300) -> str:
        return str(self.wait_status(name, "completed", timeout).get("conclusion"))

    def jobs_for(self, label: str) -> list[dict[str, Any]]:
        """Every Gitea job (all runs) that asks for ``label``."""
        found = self.gitea.list_jobs("repo", self.org, self.repo, status=None)
        return [j for j in found if label in (j.get("labels") or [])]

    def runners(self, group: str) -> list[str]:
        return [j["metadata"]["name"] for j in runner_jobs(self.kube, self.team, group)]

    def runner_report(self, group: str) -> str:
        """Each runner Job (when made, how it ended) and each Gitea job's runner: what to
        read when a step counts more runners than jobs."""
        lines = []
        for j in runner_jobs(self.kube, self.team, group):
            st = j.get("status") or {}
            lines.append(f"runner Job {j['metadata']['name']} created "
                         f"{j['metadata']['creationTimestamp']} active={st.get('active')} "
                         f"succeeded={st.get('succeeded')} failed={st.get('failed')} "
                         f"annotations={j['metadata'].get('annotations')}")  # fmt: skip
        for name, job in self.jobs().items():
            lines.append(
                f"gitea job {name}: {job['status']}/{job.get('conclusion')} "
                f"runner={job.get('runner_name')} started={job.get('started_at')}"
            )
        return "\n".join(lines) + "\n" + self.report()

    def groups(self, namespace: str | None = None) -> list[str]:
        items = self.kube.get(GROUPS.format(ns=namespace or self.team))["items"]
        return [g["metadata"]["name"] for g in items]

    def wait(self, predicate: Any, what: str, timeout: float = 90) -> Any:
        """wait_until, failing with :meth:`report` (the operator's own logs included)."""
        try:
            return wait_until(predicate, timeout=timeout, what=what)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{self.report()}") from None

    def report(self) -> str:
        """What a person debugging a failure looks at first."""
        lines = [f"lease: {self.lease()}"]
        for p in self.pods():
            name = p["metadata"]["name"]
            with contextlib.suppress(AssertionError):
                log = self.kubectl("logs", "-n", self.namespace, name, "--tail", "60")
                lines.append(f"--- log of {name}:\n{log}")
        if not self.team:
            return "\n".join(lines)
        lines.append(f"gitea jobs: {[(n, j['status']) for n, j in self.jobs().items()]}")
        for p in self.pods():
            st = p.get("status") or {}
            lines.append(f"operator pod {p['metadata']['name']}: {st.get('phase')} "
                         f"{st.get('containerStatuses')}")  # fmt: skip
        for g in self.kube.get(GROUPS.format(ns=self.team))["items"]:
            lines.append(f"group {g['metadata']['name']}: {g.get('status')}")
        return "\n".join(lines)
