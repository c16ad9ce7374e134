"""Fixtures for running the operator against the testbed: the project's CRD and RBAC
installed from ``manifests/``, a namespace per test prepared as a team would prepare it, a
Gitea organisation and repository with real workflows, and the operator itself started as
a user starts it (the CLI, in a subprocess), with its own ServiceAccount's token."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support import manifests
from tests.testbed.gitea_api import GiteaAPI
from tests.testbed.kube import KubeClient, wait_for
from tests.testbed.kubelet_harness import runner_binary

OPERATOR_NS = "gitea-runner-operator"
OPERATOR_SA = "gitea-runner-operator"
GROUPS = "/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups"


# A runner image whose tag tells the testbed's kwok how long the "runner" Pod runs before
# it completes (see tests/testbed/kwok/pod-complete.yaml). kwok pulls no image.
def kwok_image(seconds: int) -> str:
    return f"kwok.invalid/act_runner:complete-after-{seconds}s"


@pytest.fixture(scope="session")
def cluster(testbed: Any) -> Any:
    """The testbed with the project's CRD and RBAC applied from manifests/, as an admin would."""
    kube: KubeClient = testbed.kube
    for name in ("crd.yaml", "namespace.yaml", "serviceaccount.yaml", "rbac.yaml"):
        for obj in manifests.load(name):
            manifests.apply(kube, obj)
    wait_for(
        lambda: any(
            c["type"] == "Established" and c["status"] == "True"
            for c in kube.get(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/runnergroups.gitea.bpg.pw"
            )
            .get("status", {})
            .get("conditions", [])
        ),
        timeout=30,
        what="RunnerGroup CRD established",
    )
    wait_for(lambda: _served(kube), timeout=30, what="RunnerGroup API served")
    return testbed


def _served(kube: KubeClient) -> bool:
    try:
        kube.get("/apis/gitea.bpg.pw/v1alpha1/runnergroups")
        return True
    except Exception:
        return False


@pytest.fixture
def kwok(cluster: Any) -> None:
    """For tests that need kwok to run and complete runner Pods (the testbed's fake kubelet):
    on an existing cluster (GRO_TEST_CLUSTER=existing) the fake images never start."""
    if cluster.kube_mode != "local":
        pytest.skip("needs the testbed's kwok node to complete Pods; not on an existing cluster")


@pytest.fixture
def kube(cluster: Any) -> KubeClient:
    return cluster.kube


@pytest.fixture
def gitea(cluster: Any) -> GiteaAPI:
    return GiteaAPI(cluster.gitea_url, token=cluster.gitea_token)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def team_namespace(kube: KubeClient) -> Iterator[str]:
    """A team namespace: privileged Pods allowed, the operator may `get` its Secrets (the
    namespace-wide binding; examples/secret-access.yaml shows the by-name one)."""
    ns = make_namespace(kube, unique("team"))
    allow_secrets(kube, ns)
    yield ns
    delete_namespace(kube, ns)


def delete_namespace(kube: KubeClient, ns: str) -> None:
    """Delete a test namespace without waiting for an operator that has already stopped:
    the groups' teardown finalizers are dropped first (tests of the teardown itself wait
    for it explicitly)."""
    with contextlib.suppress(Exception):
        for group in kube.get(GROUPS.format(ns=ns))["items"]:
            name = group["metadata"]["name"]
            kube.patch(f"{GROUPS.format(ns=ns)}/{name}", {"metadata": {"finalizers": None}})
    kube.delete(f"/api/v1/namespaces/{ns}")


def allow_secrets(kube: KubeClient, ns: str) -> None:
    manifests.apply(
        kube,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "gitea-runner-operator-secrets"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "gitea-runner-operator-secrets",
            },
            "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_SA, "namespace": OPERATOR_NS}],
        },
        namespace=ns,
    )


@dataclass
class GiteaTarget:
    org: str
    repo: str
    registration_token: str


@pytest.fixture
def gitea_target(gitea: GiteaAPI) -> Iterator[GiteaTarget]:
    org = unique("org")
    gitea.create_org(org)
    repo = "app"
    gitea.create_repo(org, repo)
    token = gitea.registration_token("org", owner=org)
    yield GiteaTarget(org, repo, token)
    with contextlib.suppress(Exception):
        gitea.delete(f"/repos/{org}/{repo}")
    with contextlib.suppress(Exception):
        gitea.delete(f"/orgs/{org}")


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
    return {
        "apiVersion": "gitea.bpg.pw/v1alpha1",
        "kind": "RunnerGroup",
        "metadata": {"name": name},
        "spec": body,
    }


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class OperatorProcess:
    proc: subprocess.Popen[bytes]
    log_path: Path
    health_port: int
    args: list[str] = field(default_factory=list)
    killed: bool = False

    def kill(self) -> None:
        """SIGKILL, as the OOM killer or a node failure would: no clean-up runs."""
        self.killed = True
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_events(self) -> list[dict[str, Any]]:
        events = []
        for line in self.log().splitlines():
            with contextlib.suppress(ValueError):
                events.append(json.loads(line))
        return events

    def readyz(self) -> int:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.health_port}/readyz", timeout=2
            ) as resp:
                return int(resp.status)
        except Exception:
            return 0

    def stop(self, timeout: float = 40) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)


@pytest.fixture
def start_operator(
    cluster: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., OperatorProcess]]:
    """Start ``python -m gitea_runner_operator`` with the ServiceAccount token from
    manifests/ (never the admin token), wait until /readyz answers, and on teardown send
    SIGTERM and require a clean exit."""
    started: list[OperatorProcess] = []

    def start(
        *namespaces: str,
        extra: tuple[str, ...] = (),
        token: str | None = None,
        env: dict[str, str] | None = None,
    ) -> OperatorProcess:
        sa_token = token or cluster.kube.create_token(OPERATOR_NS, OPERATOR_SA)
        kubeconfig = cluster.kubeconfig_for_token(sa_token, tmp_path / f"kubeconfig-{len(started)}")
        port = free_port()
        args = [
            sys.executable, "-m", "gitea_runner_operator",
            "--kubeconfig", str(kubeconfig),
            "--health-host", "127.0.0.1", "--health-port", str(port),
            "--leader-election-namespace", OPERATOR_NS,
            "--log-format", "json", "--log-level", "debug",
            "--job-ttl-seconds", "5",
            "--webhook-host", "127.0.0.1", "--webhook-port", str(free_port()),
            *[a for ns in namespaces for a in ("--namespace", ns)],
            *extra,
        ]  # fmt: skip
        log_path = tmp_path / f"operator-{len(started)}.log"
        env = {**{k: v for k, v in os.environ.items() if k != "KUBECONFIG"}, **(env or {})}
        proc = subprocess.Popen(args, stdout=log_path.open("wb"), stderr=subprocess.STDOUT, env=env)
        op = OperatorProcess(proc, log_path, port, args)
        started.append(op)
        with contextlib.suppress(TimeoutError):
            wait_for(
                lambda: op.proc.poll() is not None or op.readyz() == 200,
                timeout=60,
                what="operator /readyz",
            )
        if op.proc.poll() is not None or op.readyz() != 200:
            raise AssertionError(f"operator did not become ready:\n{op.log()[-4000:]}")
        return op

    yield start
    failed = request.node.rep_call.failed if hasattr(request.node, "rep_call") else False
    for op in started:
        code = op.stop()
        if failed:
            sys.stderr.write(f"\n--- operator log ({op.log_path}) ---\n{op.log()[-6000:]}\n")
        if not op.killed:
            assert code == 0, f"operator exited {code} on SIGTERM:\n{op.log()[-4000:]}"


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Any:
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    return rep


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
