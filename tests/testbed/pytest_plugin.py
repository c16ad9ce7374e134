"""pytest fixtures for the real-peer testbed (independent of the operator package).

Enable with ``pytest_plugins = ["tests.testbed.pytest_plugin"]`` in tests/conftest.py.

Why the skip/fail rules: a developer without Go should still be able to run
the unit tests, so the testbed skips with a how-to; in CI (``CI=true``) or with
``GRO_REQUIRE_TESTBED=1`` a missing or broken testbed must fail loudly, never
turn the integration suite into a silent pass.

Environment:
  GRO_TEST_CLUSTER=existing   use the current KUBECONFIG cluster instead of the
                              local control plane (Gitea still starts locally;
                              there are no kwok/harness nodes then)
  GRO_REQUIRE_TESTBED=1       fail instead of skip when Go is missing
  GRO_TESTBED_KEEP=1          keep the sandbox workdir (logs) after the session
  GRO_TESTBED_CACHE=DIR       binary cache (default ~/.cache/gitea-runner-operator/testbed)
  GRO_TESTBED_RUNNER_BIN=EXE  run this runner binary (e.g. an official gitea-runner) instead
                              of the testbed's own (see runners.py)

Every session's header and summary name the runner the e2e tests ran (``runner:
gro-testbed-runner 0.2 (gitea.com/gitea/act v0.261.10), not the official Gitea Runner``).

The real node (``real_node`` fixture, tests marked ``real_node``) needs Linux, root and the
Debian packages of ``realnode.PACKAGES``; without them it skips with a line saying plainly
that the real-node suite did not run (and fails under CI=true / GRO_REQUIRE_TESTBED=1).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import pytest

from . import build, runners
from .gitea_api import GiteaAPI, GiteaError
from .kube import KubeClient, wait_for
from .sandbox import Sandbox, gitea_component

if TYPE_CHECKING:
    from .gitops import Flux
    from .kubelet_harness import KubeletHarness
    from .realnode import RealNode

COLD_BUILD_HINT = (
    "install Go >= 1.26 (and gcc for Gitea's sqlite) to enable it; the first run builds "
    "etcd, Kubernetes v1.36, kwok and Gitea from Go modules, about 15-20 min on 2 cores "
    "(later runs use the cache and start in seconds); "
    "or prebuild with `python -m tests.testbed build`"
)


def testbed_required() -> bool:
    """CI or an explicit request: a testbed that cannot start is a failure, not a skip."""
    return (
        os.environ.get("CI", "").lower() == "true" or os.environ.get("GRO_REQUIRE_TESTBED") == "1"
    )


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Name the runner binary up front, so no log hides which one the e2e tests ran."""
    return [f"runner: {runners.planned()}", *_real_node_header(config)]


# The runners that pytest-xdist workers ran, as each worker reported them when it ended.
_WORKER_RUNNERS: list[str] = []


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On a pytest-xdist worker: hand the runners it ran to the controller, which writes the
    summary (a worker's own terminal output reaches nobody)."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["gro_runners"] = [rb.describe() for rb in runners.used()]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """On the pytest-xdist controller: collect what a finished worker reported."""
    for described in getattr(node, "workeroutput", {}).get("gro_runners", []):
        if described not in _WORKER_RUNNERS:
            _WORKER_RUNNERS.append(described)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Repeat the runner actually run at the end, where a reader of a CI log looks."""
    _real_node_summary(terminalreporter)
    described = [rb.describe() for rb in runners.used()]
    for line in described + [d for d in _WORKER_RUNNERS if d not in described]:
        terminalreporter.write_line(f"runner: {line}", bold=True)


def _uncaptured(request: pytest.FixtureRequest) -> contextlib.AbstractContextManager[Any]:
    """Let a fixture's output through pytest's capture (a cold build's progress lines)."""
    capman = request.config.pluginmanager.getplugin("capturemanager")
    return capman.global_and_fixture_disabled() if capman else contextlib.nullcontext()


@pytest.fixture(scope="session")
def runner_binary(request: pytest.FixtureRequest) -> runners.RunnerBinary:
    """The runner the e2e tests run (built first when needed): the testbed's own, or the
    binary ``GRO_TESTBED_RUNNER_BIN`` names."""
    try:
        with _uncaptured(request):  # a cold runner build takes minutes: show its progress
            rb = runners.resolve()
    except Exception as e:
        pytest.fail(f"runner build failed ({type(e).__name__}): {e}", pytrace=False)
    reporter = request.config.pluginmanager.getplugin("terminalreporter")
    if reporter is not None:
        with _uncaptured(request):
            reporter.write_line(f"\nrunner: {rb.describe()}", bold=True)
    return rb


def _needed_components(kube_mode: str) -> list[str]:
    return (["etcd", "kubernetes", "kwok"] if kube_mode == "local" else []) + [gitea_component()]


def _build_or_skip(request: pytest.FixtureRequest, components: list[str], what: str) -> None:
    """Build the missing components, or skip (fail in CI) with a how-to when Go is missing;
    a failed build always fails."""
    missing = [c for c in components if not build.is_built(c)]
    if missing and shutil.which("go") is None:
        msg = f"{what} not built ({', '.join(missing)}) and `go` is not on PATH: {COLD_BUILD_HINT}"
        if testbed_required():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    if missing:
        # a cold build takes many minutes: show its progress lines instead of a silent hang
        try:
            with _uncaptured(request):
                build.ensure_built(missing)
        except Exception as e:
            pytest.fail(f"{what} build failed ({type(e).__name__}): {e}", pytrace=False)


@pytest.fixture(scope="session")
def testbed(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """A started :class:`Sandbox` shared by the whole session (built first when needed)."""
    kube_mode = "existing" if os.environ.get("GRO_TEST_CLUSTER") == "existing" else "local"
    _build_or_skip(request, _needed_components(kube_mode), "testbed")
    sb = Sandbox(kube=kube_mode)
    try:
        sb.start()
    except Exception as e:
        sb.stop(keep=True)
        pytest.fail(
            f"testbed failed to start ({type(e).__name__}): {e}\nlogs kept in {sb.workdir}/logs",
            pytrace=False,
        )
    try:
        yield sb
    finally:
        sb.stop()


@pytest.fixture(scope="session")
def flux(testbed: Sandbox, request: pytest.FixtureRequest) -> Iterator[Flux]:
    """Flux's source-controller and kustomize-controller running against the testbed, with
    their CRDs installed (see gitops.py). Built on first use: minutes cold."""
    from .gitops import CONTROLLERS, Flux

    _build_or_skip(request, list(CONTROLLERS), "Flux")
    f = Flux(testbed)
    try:
        with _uncaptured(request):
            f.start()
            print(f"Flux: CRDs installed and both controllers ready in {f.startup_seconds}s")
    except Exception as e:
        f.stop()
        pytest.fail(f"Flux failed to start ({type(e).__name__}): {e}", pytrace=False)
    try:
        yield f
    finally:
        f.stop()


@pytest.fixture(scope="session")
def kstatus_bin(request: pytest.FixtureRequest) -> Path:
    """``gro-kstatus``: kstatus (sigs.k8s.io/cli-utils) as a command line, see gitops.kstatus."""
    _build_or_skip(request, ["kstatus"], "gro-kstatus")
    return build.binary("gro-kstatus")


@pytest.fixture(scope="session")
def kube(testbed: Sandbox) -> KubeClient:
    """Admin KubeClient for the testbed's API server."""
    return testbed.kube_client()


@pytest.fixture(scope="session")
def gitea(testbed: Sandbox) -> GiteaAPI:
    """GiteaAPI authenticated with the site admin's all-scopes token."""
    assert testbed.gitea_url and testbed.gitea_token
    return GiteaAPI(testbed.gitea_url, testbed.gitea_token)


def unique_name(prefix: str) -> str:
    """A DNS-1123 and Gitea safe unique name."""
    return f"{prefix}-{secrets.token_hex(4)}"


@pytest.fixture
def kube_namespace(testbed: Sandbox, kube: KubeClient) -> Iterator[str]:
    """A fresh namespace (with its default ServiceAccount ready); deleted afterwards."""
    name = unique_name("gro-test")
    kube.post(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    wait_for(
        lambda: kube.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        30,
        what=f"ServiceAccount {name}/default",
    )
    try:
        yield name
    finally:
        kube.delete(f"/api/v1/namespaces/{name}")


@pytest.fixture
def gitea_org(gitea: GiteaAPI) -> Iterator[str]:
    """A fresh Gitea organisation owned by the admin; deleted afterwards (best effort)."""
    name = unique_name("org")
    gitea.create_org(name)
    yield name
    for repo in gitea.get(f"/orgs/{name}/repos") or []:
        with contextlib.suppress(GiteaError):
            gitea.delete(f"/repos/{name}/{repo['name']}")
    with contextlib.suppress(GiteaError):
        gitea.delete(f"/orgs/{name}")


class RepoRef(NamedTuple):
    """owner/name of a test repository."""

    owner: str
    name: str

    @property
    def full_name(self) -> str:
        """``owner/name``."""
        return f"{self.owner}/{self.name}"


@pytest.fixture
def gitea_repo(gitea: GiteaAPI, gitea_org: str) -> RepoRef:
    """A fresh repository (auto-initialised, branch main) in ``gitea_org``."""
    name = unique_name("repo")
    gitea.create_repo(gitea_org, name)
    return RepoRef(gitea_org, name)


@pytest.fixture
def kubelet_harness(
    testbed: Sandbox, kube: KubeClient, runner_binary: runners.RunnerBinary
) -> Iterator[KubeletHarness]:
    """Run pods of ``e2e-node-0`` as host runner processes; that node is the only schedulable one.

    Afterwards kwok-node-0 is schedulable again and every runner process is stopped.
    """
    from .kubelet_harness import KubeletHarness

    if not testbed.with_harness_node:
        pytest.skip(
            "the kubelet harness needs the local control plane (not GRO_TEST_CLUSTER=existing)"
        )
    h = KubeletHarness(
        kube, workdir=testbed.workdir / "harness" / unique_name("h"), runner=runner_binary.path
    )
    h.start()
    testbed.use_harness_node(True)
    try:
        yield h
    finally:
        testbed.use_harness_node(False)
        h.stop()


REAL_NODE_SKIPPED = "REAL-NODE SUITE DID NOT RUN"


def _real_node_missing(config: pytest.Config) -> list[str]:
    from .realnode import missing_prerequisites

    missing = missing_prerequisites()
    if os.environ.get("GRO_TEST_CLUSTER") == "existing":
        missing.append("the testbed's own control plane (GRO_TEST_CLUSTER=existing is set)")
    return missing


def _real_node_header(config: pytest.Config) -> list[str]:
    """Say up front whether the real-node suite can run here."""
    missing = _real_node_missing(config)
    if not missing:
        return ["real node: available (kubelet + containerd + runc + CNI bridge, one at a time)"]
    return [f"real node: NOT available here, lacking {', '.join(missing)}: {REAL_NODE_SKIPPED}"]


def _real_node_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """A skipped real-node suite is named at the end too, where nobody can miss it."""
    skipped = [
        r
        for r in terminalreporter.stats.get("skipped", [])
        if "real_node" in getattr(r, "keywords", {})
    ]
    if skipped:
        terminalreporter.write_line(
            f"{REAL_NODE_SKIPPED}: {len(skipped)} real_node test(s) skipped "
            f"({', '.join(_real_node_missing(terminalreporter.config)) or 'see skips'})",
            red=True,
            bold=True,
        )


@pytest.fixture(scope="session")
def real_node(testbed: Sandbox, request: pytest.FixtureRequest) -> Iterator[RealNode]:
    """The testbed's one real node (see realnode.py), with the local images imported.

    Built on first use: the kubelet (about 6 min cold), containerd and runc, and the images
    (1-3 min), each part's
    time printed. Stopped, and the machine cleaned, at the end of the session.
    """
    import time

    from . import images
    from .realnode import NODE_NAME, RealNode

    missing = _real_node_missing(request.config)
    if missing:
        msg = f"{REAL_NODE_SKIPPED}: it needs {', '.join(missing)}"
        if testbed_required():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    with _uncaptured(request):
        t0 = time.monotonic()
        try:
            build.ensure_built(["kubelet", "containerd", "runc"])
            runners.resolve()  # the images carry the session's runner
            built = images.ensure_images()
        except Exception as e:
            pytest.fail(f"real node: build failed ({type(e).__name__}): {e}", pytrace=False)
        print(
            f"real node: kubelet, containerd, runc and images ready in {time.monotonic() - t0:.0f}s"
        )
        assert testbed.kubeconfig is not None and testbed.kube is not None
        node = RealNode(
            testbed.kube,
            testbed.kubeconfig,
            testbed.workdir / "real-node",
            built,
            pause_image=f"docker.io/{images.PAUSE}",
        )
        try:
            node.start()
        except Exception as e:
            pytest.fail(f"real node {NODE_NAME} failed to start: {e}", pytrace=False)
    try:
        yield node
    finally:
        with _uncaptured(request):
            node.stop()
