"""Fixtures for running the operator against the testbed, for the folders of tests against
it (each one's conftest.py star-imports them; tests/testbed keeps the testbed plugin's own
``kube`` and ``gitea``, which these override): the project's CRD and RBAC installed from
``manifests/``, a namespace per test prepared as a team would prepare it, a Gitea
organisation and repository with real workflows, and the operator itself started as a user
starts it (the CLI, in a subprocess, through the one launcher), with its own
ServiceAccount's token."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import manifests
from tests.support.launcher import OPERATOR_NS, OPERATOR_SA, OperatorProcess, launch
from tests.support.testbed import (
    GiteaTarget,
    Team,
    allow_secrets,
    delete_namespace,
    make_namespace,
    make_tokens,
    unique,
)
from tests.testbed.gitea_api import GiteaAPI
from tests.testbed.kube import KubeClient, wait_for

__all__ = [
    "cluster",
    "gitea",
    "gitea_target",
    "kube",
    "kwok",
    "pytest_runtest_makereport",
    "start_operator",
    "team",
    "team_namespace",
]


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


@pytest.fixture
def team_namespace(kube: KubeClient) -> Iterator[str]:
    """A team namespace: privileged Pods allowed, the operator may `get` its Secrets (the
    namespace-wide binding; examples/secret-access.yaml shows the by-name one)."""
    ns = make_namespace(kube, unique("team"))
    allow_secrets(kube, ns)
    yield ns
    delete_namespace(kube, ns)


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


@pytest.fixture
def team(kube: KubeClient, cluster: Any, team_namespace: str, gitea_target: GiteaTarget) -> Team:
    """The setup most scenarios share: a team namespace, a Gitea organisation with a
    repository, and the Secret "tokens" with its registration token and the API token."""
    make_tokens(kube, team_namespace, cluster, gitea_target)
    return Team(kube, cluster.gitea_url, team_namespace, gitea_target)


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
        op = launch(
            kubeconfig,
            namespaces,
            log_path=tmp_path / f"operator-{len(started)}.log",
            extra=("--log-level", "debug", "--job-ttl-seconds", "5", *extra),
            env=env,
        )
        started.append(op)
        if not op.wait_ready(timeout=60):
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
