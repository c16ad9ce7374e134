"""Start a real Kubernetes control plane (+ kwok nodes) and a real Gitea as local processes.

Why: the operator's integration and e2e tests need the real peers (API server
semantics, RBAC, Jobs, TTL and garbage collection; Gitea's Actions API and
runner protocol), and the project's machines have no container engine. Every
peer is a Go binary built by :mod:`tests.testbed.build`; this module runs them
on free 127.0.0.1 ports inside one temporary directory, each with its log in
``<workdir>/logs/<name>.log``, and stops every process group on ``stop()``,
on context-manager exit and at interpreter exit.

Two node kinds exist (see README.md):

* ``kwok-node-0`` (label ``gro-testbed/kwok=true``): a kwok-managed fake node;
  pods bound to it become Running at once and, when owned by a Job, Succeeded
  after the ``pod-complete.stage.kwok.x-k8s.io/delay`` annotation (default 3 s).
* ``e2e-node-0`` (label ``gro-testbed/harness=true``): kept Ready by a second
  kwok that runs only node stages, so nothing fakes its pods; the test harness
  (:mod:`tests.testbed.kubelet_harness`) plays kubelet there. It starts
  cordoned; ``use_harness_node(True)`` swaps which node is schedulable.
"""

from __future__ import annotations

import atexit
import contextlib
import getpass
import json
import os
import random
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

from gitea_runner_operator.api.constants import USERNS_RUNTIME_CLASS

from . import build
from .gitea_api import GiteaAPI
from .kube import KubeClient, load_kubeconfig_client, wait_for, write_kubeconfig

KWOK_DIR = Path(__file__).resolve().parent / "kwok"
KWOK_NODE = "kwok-node-0"
HARNESS_NODE = "e2e-node-0"
KWOK_LABEL = "gro-testbed/kwok"
HARNESS_LABEL = "gro-testbed/harness"
SERVICE_CIDR = "10.96.0.0/16"


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1, below the kernel's ephemeral range.

    A port the kernel picks (a bind to port 0) comes from the ephemeral range, which every
    outgoing connection on the machine draws from too: between this answer and the server's
    own bind, a client may take it. CI saw exactly that ("bind: address already in use")
    while a benchmark next to it held a thousand groups' connections. Ports below the range
    are never handed out implicitly, so only another explicit bind can race for them."""
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(max(1024, low - 12_000), low)  # noqa: S311 (not a secret)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # all taken: the kernel's
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


_LIVE: list[Sandbox] = []
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """preexec_fn: the child gets SIGKILL when the process that started it dies.

    Why: a test run killed with SIGKILL (or a crashed interpreter) runs no atexit
    handler; without this its etcd/apiserver/gitea would be left running.
    Linux only; silently a no-op elsewhere.
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:  # noqa: S110 - best effort, platform without prctl
        pass


def _on_sigterm(signum: int, frame: object) -> None:
    """Stop every live sandbox, then die of SIGTERM as the default action would."""
    for sb in list(_LIVE):
        sb.stop()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _install_sigterm_handler() -> None:
    """Route SIGTERM (e.g. from `timeout`) through stop() unless someone else handles it."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _on_sigterm)


def http_ok(url: str, token: str | None = None, insecure: bool = True) -> bool:
    """Whether ``url`` answers 200 (a readiness probe); any error is just "not yet"."""
    ctx = ssl.create_default_context()
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(
            req, context=ctx if url.startswith("https") else None, timeout=5
        ) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


class StartupError(RuntimeError):
    """A peer failed to start; the message carries the tail of its log."""


GITEA_VERSIONS = {"default": "gitea", "oldest": "gitea-oldest"}


def gitea_component(version: str | None = None) -> str:
    """The build component for a Gitea version choice (see ``GITEA_VERSIONS``).

    ``None`` reads ``$GRO_TESTBED_GITEA`` so a whole test run can be pointed at the
    oldest supported release without code changes.
    """
    choice = version if version is not None else os.environ.get("GRO_TESTBED_GITEA") or "default"
    if choice not in GITEA_VERSIONS:
        raise ValueError(
            f"gitea_version (or GRO_TESTBED_GITEA) must be one of "
            f"{', '.join(GITEA_VERSIONS)}, not {choice!r}"
        )
    return GITEA_VERSIONS[choice]


class Sandbox:
    """A running testbed: Kubernetes control plane + kwok + Gitea, all local.

    Use as ``with Sandbox() as sb: ...`` or ``sb.start(); ...; sb.stop()``.

    ``kube``: ``"local"`` (start etcd/apiserver/controller-manager/scheduler/kwok),
    ``"existing"`` (use the current KUBECONFIG cluster; no nodes are created)
    or ``"none"``. ``gitea``: start Gitea. ``build_missing``: build binaries
    that are not in the cache (a cold build takes about 12 minutes).
    ``gitea_settings``: extra app.ini keys, e.g.
    ``{"actions": {"ZOMBIE_TASK_TIMEOUT": "1m"}}``. ``gitea_version``: ``"default"``
    (the pinned release, build component ``gitea``) or ``"oldest"`` (the oldest release
    the operator supports, component ``gitea-oldest``); when not given,
    ``$GRO_TESTBED_GITEA`` or ``"default"``. ``die_with_parent``: the
    peers get SIGKILL when this process dies (turn off to leave them running).
    """

    def __init__(
        self,
        kube: str = "local",
        gitea: bool = True,
        workdir: str | os.PathLike[str] | None = None,
        keep_workdir: bool | None = None,
        build_missing: bool = True,
        harness_node: bool = True,
        die_with_parent: bool = True,
        gitea_settings: dict[str, dict[str, str]] | None = None,
        gitea_version: str | None = None,
        priority_and_fairness: bool = False,
    ) -> None:
        self.gitea_component = gitea_component(gitea_version)
        # API Priority and Fairness: off in the shared testbed (one client's flow must not
        # throttle a parallel suite's); on for a test of how the API server classifies.
        self.priority_and_fairness = priority_and_fairness
        if kube not in ("local", "existing", "none"):
            raise ValueError(f"kube must be local, existing or none, not {kube!r}")
        self.kube_mode = kube
        self.with_gitea = gitea
        self.with_harness_node = harness_node and kube == "local"
        self.build_missing = build_missing
        # extra app.ini settings, {"section": {"KEY": "value"}}; "" is the top level
        self.gitea_settings = gitea_settings or {}
        # peers get SIGKILL when the starting thread's process dies (off for `up --detach`)
        self.die_with_parent = die_with_parent
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="gro-testbed-"))
        if keep_workdir is None:
            keep_workdir = os.environ.get("GRO_TESTBED_KEEP", "") not in ("", "0")
        self.keep_workdir = keep_workdir
        self.logs_dir = self.workdir / "logs"
        self.logs: dict[str, Path] = {}
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._argv: dict[str, tuple[list[str], dict[str, str] | None, Path | None]] = {}
        self._log_files: list[IO[bytes]] = []
        self.started = False
        self.startup_seconds: float | None = None
        # Kubernetes
        self.kubeconfig: Path | None = None
        self.apiserver_url: str | None = None
        self.ca_file: Path | None = None
        self.admin_token: str | None = None
        self.kube: KubeClient | None = None
        self.etcd_url: str | None = None
        # Gitea
        self.gitea_url: str | None = None
        self.gitea_admin_username = "gro-admin"
        self.gitea_admin_password = "gro-admin-" + secrets.token_hex(8)
        self.gitea_admin_email = "gro-admin@example.invalid"
        self.gitea_token: str | None = None
        self.gitea_dir: Path | None = None
        self.gitea_config: Path | None = None
        self.bin: dict[str, Path] = {}

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Sandbox:
        """Build what is missing, then start every peer and wait until each is ready."""
        if self.started:
            return self
        t0 = time.monotonic()
        atexit.register(self.stop)
        _LIVE.append(self)
        _install_sigterm_handler()
        self.started = True
        try:
            self.logs_dir.mkdir(parents=True, exist_ok=True)
            self._resolve_binaries()
            if self.kube_mode == "local":
                self._start_kubernetes()
            elif self.kube_mode == "existing":
                self._use_existing_cluster()
            if self.with_gitea:
                self._start_gitea()
            if self.kube_mode == "local":
                self._wait_kubernetes_settled()
        except BaseException:
            self.stop(keep=True)
            raise
        self.startup_seconds = round(time.monotonic() - t0, 1)
        self._write_state()
        return self

    def stop(self, keep: bool | None = None) -> None:
        """Stop every process group, newest first (SIGTERM, SIGKILL after 5 s); idempotent.

        One by one in reverse start order: stopping etcd under a live API server
        makes the API server's graceful shutdown hang until the SIGKILL.
        """
        for _, p in list(self.processes.items())[::-1]:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=5)
            # the group may hold children (e.g. git run by gitea) even after the leader exited
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)
        self.processes.clear()
        for f in self._log_files:
            with contextlib.suppress(OSError):
                f.close()
        self._log_files.clear()
        if self.started:
            keep = self.keep_workdir if keep is None else (keep or self.keep_workdir)
            if self._own_workdir and not keep:
                shutil.rmtree(self.workdir, ignore_errors=True)
        self.started = False
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        with contextlib.suppress(ValueError):
            _LIVE.remove(self)

    # ------------------------------------------------------------------ helpers
    def _resolve_binaries(self) -> None:
        needed: list[str] = []
        if self.kube_mode == "local":
            needed += ["etcd", "kubernetes", "kwok"]
        if self.with_gitea:
            needed.append(self.gitea_component)
        for comp in needed:
            if not build.is_built(comp):
                if not self.build_missing:
                    raise StartupError(f"{comp} is not built; run: python -m tests.testbed build")
                build.build_component(comp)
            cdir = build.component_dir(comp)
            for b in build.COMPONENTS[comp].binaries:
                self.bin[b] = cdir / "bin" / b
        self._gitea_static = (
            build.component_dir(self.gitea_component) / "static" if self.with_gitea else None
        )

    def _spawn(
        self, name: str, argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.Popen[bytes]:
        """Start one long-running peer in its own process group, log to logs/<name>.log."""
        log_path = self.logs_dir / f"{name}.log"
        f = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._log_files.append(f)
        f.write(("$ " + " ".join(argv) + "\n").encode())
        f.flush()
        p = subprocess.Popen(
            argv,
            stdout=f,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd or self.workdir,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent if self.die_with_parent else None,
        )
        self.processes[name] = p
        self.logs[name] = log_path
        self._argv[name] = (argv, env, cwd)
        return p

    def spawn(
        self, name: str, argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.Popen[bytes]:
        """Run one more peer beside the testbed's own (e.g. Flux's controllers), logged to
        ``logs/<name>.log`` and stopped with the sandbox, or earlier by :meth:`terminate`."""
        return self._spawn(name, argv, env=env, cwd=cwd)

    def terminate(self, name: str) -> None:
        """Stop one peer: SIGTERM to its process group, SIGKILL after 10 s."""
        proc = self.processes[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def restart(self, name: str, down_seconds: float = 0.0) -> None:
        """Stop one peer (see :meth:`terminate`), stay down for ``down_seconds``, start it
        again with the same arguments. For fault tests: e.g. an API server restart during an
        upgrade. Returns once the peer answers again."""
        self.terminate(name)
        time.sleep(down_seconds)
        argv, env, cwd = self._argv[name]
        self._spawn(name, argv, env=env, cwd=cwd)
        if name == "kube-apiserver":
            self._wait(
                name,
                lambda: http_ok(f"{self.apiserver_url}/readyz", self.admin_token),
                60,
                "kube-apiserver ready after restart",
            )

    def log_tail(self, name: str, lines: int = 40) -> str:
        """The last lines of a peer's log (for error messages)."""
        p = self.logs.get(name)
        if not p or not p.exists():
            return ""
        return "\n".join(p.read_text(errors="replace").splitlines()[-lines:])

    def wait_peer(self, name: str, predicate: Any, timeout: float, what: str) -> Any:
        """Wait until ``predicate()`` is truthy; fail at once, with the tail of its log, when
        the peer ``name`` exits first."""
        return self._wait(name, predicate, timeout, what)

    def _wait(self, name: str, predicate: Any, timeout: float, what: str) -> Any:
        """wait_for, but fail fast with the log tail when the process died."""
        proc = self.processes.get(name)
        exited = object()  # truthy: ends the wait at once (an exception would be "not yet")

        def check() -> Any:
            if proc is not None and proc.poll() is not None:
                return exited
            return predicate()

        try:
            value = wait_for(check, timeout=timeout, what=what)
        except TimeoutError as e:
            cause = e.__cause__
            if isinstance(cause, StartupError):
                raise cause from None
            raise StartupError(
                f"{e} (last error: {cause!r})\n--- {name} log ---\n{self.log_tail(name)}"
            ) from None
        if value is exited:
            assert proc is not None
            raise StartupError(f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}")
        return value

    def _run(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float = 120,
    ) -> str:
        """Run a one-shot command, log it, return stdout; raise StartupError on failure."""
        log_path = self.logs_dir / f"{name}.log"
        r = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd or self.workdir,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        with open(log_path, "a") as f:
            f.write("$ " + " ".join(argv) + f"\n[exit {r.returncode}]\n{r.stderr}\n")
        self.logs[name] = log_path
        if r.returncode != 0:
            raise StartupError(
                f"{' '.join(argv[:4])} ... failed ({r.returncode}):\n"
                f"{r.stderr[-3000:]}{r.stdout[-2000:]}"
            )
        return r.stdout

    # ------------------------------------------------------------------ kubernetes
    def _start_kubernetes(self) -> None:
        pki = self.workdir / "pki"
        pki.mkdir()
        sa_key = pki / "sa.key"
        self._run("openssl", ["openssl", "genrsa", "-out", str(sa_key), "2048"])
        self.admin_token = secrets.token_hex(24)
        tokens = pki / "tokens.csv"
        tokens.write_text(f'{self.admin_token},gro-admin,gro-admin-uid,"system:masters"\n')
        tokens.chmod(0o600)

        # etcd
        cport, pport = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{cport}"
        peer = f"http://127.0.0.1:{pport}"
        self._spawn(
            "etcd",
            [
                str(self.bin["etcd"]),
                "--name",
                "gro",
                "--data-dir",
                str(self.workdir / "etcd"),
                "--listen-client-urls",
                self.etcd_url,
                "--advertise-client-urls",
                self.etcd_url,
                "--listen-peer-urls",
                peer,
                "--initial-advertise-peer-urls",
                peer,
                "--initial-cluster",
                f"gro={peer}",
                "--unsafe-no-fsync",
                "--log-level",
                "warn",
                "--quota-backend-bytes",
                str(2 * 1024**3),
            ],
        )

        # kube-apiserver (its self-signed serving cert covers 127.0.0.1 and localhost)
        aport = free_port()
        self.apiserver_url = f"https://127.0.0.1:{aport}"
        certs = pki / "apiserver"
        self._spawn(
            "kube-apiserver",
            [
                str(self.bin["kube-apiserver"]),
                "--etcd-servers",
                self.etcd_url,
                "--bind-address",
                "127.0.0.1",
                "--advertise-address",
                "127.0.0.1",
                "--secure-port",
                str(aport),
                "--cert-dir",
                str(certs),
                "--token-auth-file",
                str(tokens),
                "--authorization-mode",
                "RBAC",
                "--service-account-issuer",
                "https://kubernetes.default.svc.cluster.local",
                "--service-account-key-file",
                str(sa_key),
                "--service-account-signing-key-file",
                str(sa_key),
                "--service-cluster-ip-range",
                SERVICE_CIDR,
                "--allow-privileged=true",
                # the real node (realnode.py) is reached by its InternalIP: its name does
                # not resolve, and pods/log fails without this
                "--kubelet-preferred-address-types",
                "InternalIP",
                "--endpoint-reconciler-type",
                "none",
                f"--enable-priority-and-fairness={str(self.priority_and_fairness).lower()}",
                "--profiling=false",
                "--v",
                "1",
            ],
        )
        # wait until etcd answers first so a dead etcd is reported as such
        self._wait("etcd", lambda: http_ok(self.etcd_url + "/health"), 30, "etcd /health")
        self._wait(
            "kube-apiserver",
            lambda: (certs / "apiserver.crt").exists(),
            60,
            "apiserver serving cert",
        )
        self.ca_file = certs / "apiserver.crt"
        self.kubeconfig = write_kubeconfig(
            self.workdir / "kubeconfig", self.apiserver_url, self.admin_token, self.ca_file
        )
        self._wait(
            "kube-apiserver",
            lambda: http_ok(self.apiserver_url + "/readyz", self.admin_token),
            90,
            "kube-apiserver /readyz",
        )
        self.kube = KubeClient(self.apiserver_url, self.admin_token, self.ca_file)

        # controller-manager and scheduler use the admin kubeconfig
        kc = str(self.kubeconfig)
        control_plane_flags = [
            "--kubeconfig", kc,
            "--authentication-kubeconfig", kc,
            "--authorization-kubeconfig", kc,
            "--leader-elect=false",
            "--bind-address", "127.0.0.1",
        ]  # fmt: skip
        kcm_port = free_port()
        self._spawn(
            "kube-controller-manager",
            [
                str(self.bin["kube-controller-manager"]),
                *control_plane_flags,
                "--secure-port",
                str(kcm_port),
                "--cert-dir",
                str(pki / "kcm"),
                "--service-account-private-key-file",
                str(sa_key),
                "--root-ca-file",
                str(self.ca_file),
                "--service-cluster-ip-range",
                SERVICE_CIDR,
                "--controllers",
                "*",
                "--v",
                "1",
                # Benchmarks only: e.g. "--kube-api-qps 100 --kube-api-burst 200" to show how
                # much of a busy group's churn is the Job controller's client limit (20/s).
                *os.environ.get("GRO_TESTBED_KCM_ARGS", "").split(),
            ],
        )
        sched_port = free_port()
        self._spawn(
            "kube-scheduler",
            [
                str(self.bin["kube-scheduler"]),
                *control_plane_flags,
                "--secure-port",
                str(sched_port),
                "--cert-dir",
                str(pki / "scheduler"),
                "--v",
                "1",
            ],
        )
        self._kcm_port, self._sched_port = kcm_port, sched_port

        # nodes, then kwok
        self._create_node(KWOK_NODE, {KWOK_LABEL: "true", "type": "kwok"}, unschedulable=False)
        stages = ["node-initialize", "node-heartbeat", "pod-ready", "pod-complete", "pod-delete"]
        self._spawn(
            "kwok",
            [
                str(self.bin["kwok"]),
                "--kubeconfig",
                kc,
                "--config",
                str(self._kwok_config("kwok-config.yaml", stages)),
                "--manage-nodes-with-label-selector",
                f"{KWOK_LABEL}=true",
                "--node-lease-duration-seconds",
                "40",
            ],
        )
        if self.with_harness_node:
            self._create_node(HARNESS_NODE, {HARNESS_LABEL: "true"}, unschedulable=True)
            self._spawn(
                "kwok-harness-node",
                [
                    str(self.bin["kwok"]),
                    "--kubeconfig",
                    kc,
                    "--config",
                    str(
                        self._kwok_config(
                            "kwok-harness-config.yaml", ["node-initialize", "node-heartbeat"]
                        )
                    ),
                    "--manage-single-node",
                    HARNESS_NODE,
                    "--node-lease-duration-seconds",
                    "40",
                ],
            )

    def _kwok_config(self, name: str, stages: list[str]) -> Path:
        """Concatenate the shipped stage files into one kwok --config file."""
        out = self.workdir / name
        out.write_text("\n---\n".join((KWOK_DIR / f"{s}.yaml").read_text() for s in stages))
        return out

    def _create_node(self, name: str, labels: dict[str, str], unschedulable: bool) -> None:
        assert self.kube
        labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **labels,
        }
        self.kube.post(
            "/api/v1/nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "spec": {"unschedulable": unschedulable},
            },
        )

    def _wait_kubernetes_settled(self) -> None:
        """Controllers, scheduler and nodes are usable (not just the API server)."""
        assert self.kube
        self._wait(
            "kube-controller-manager",
            lambda: http_ok(f"https://127.0.0.1:{self._kcm_port}/healthz"),
            60,
            "kube-controller-manager /healthz",
        )
        self._wait(
            "kube-scheduler",
            lambda: http_ok(f"https://127.0.0.1:{self._sched_port}/healthz"),
            60,
            "kube-scheduler /healthz",
        )
        # the serviceaccount controller creates 'default' SAs; root-ca publisher the CA ConfigMap
        self._wait(
            "kube-controller-manager",
            lambda: self.kube.exists("/api/v1/namespaces/default/serviceaccounts/default"),
            60,
            "ServiceAccount default/default",
        )
        self._wait(
            "kube-controller-manager",
            lambda: self.kube.exists("/api/v1/namespaces/default/configmaps/kube-root-ca.crt"),
            60,
            "ConfigMap default/kube-root-ca.crt",
        )
        nodes = [("kwok", KWOK_NODE)] + (
            [("kwok-harness-node", HARNESS_NODE)] if self.with_harness_node else []
        )
        for proc, node in nodes:
            self._wait(proc, lambda n=node: self.node_ready(n), 60, f"node {node} Ready")
        # What a platform makes for mode dind-userns (the default mode): the RuntimeClass its
        # runner Pods name. kwok runs no container; on the real node its handler is a runc
        # with /dev/net/tun (tests/testbed/realnode.py).
        classes = "/apis/node.k8s.io/v1/runtimeclasses"
        if not self.kube.exists(f"{classes}/{USERNS_RUNTIME_CLASS}"):
            self.kube.post(
                classes,
                {
                    "apiVersion": "node.k8s.io/v1",
                    "kind": "RuntimeClass",
                    "metadata": {"name": USERNS_RUNTIME_CLASS},
                    "handler": USERNS_RUNTIME_CLASS,
                },
            )

    def node_ready(self, name: str) -> bool:
        """Whether a node's Ready condition is True."""
        assert self.kube
        node = self.kube.get(f"/api/v1/nodes/{name}")
        return any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in node.get("status", {}).get("conditions", [])
        )

    def _use_existing_cluster(self) -> None:
        client, info = load_kubeconfig_client()
        self.kube = client
        self.kubeconfig = Path(info["kubeconfig"])
        self.apiserver_url = info["server"]
        self.ca_file = Path(info["ca_file"]) if info["ca_file"] else None
        self.admin_token = info["token"]
        wait_for(
            lambda: client.get("/version"),
            timeout=30,
            what=f"existing cluster {self.apiserver_url}",
        )

    def kubeconfig_for_token(
        self, token: str, path: str | os.PathLike[str] | None = None, namespace: str | None = None
    ) -> Path:
        """Write a kubeconfig that authenticates with ``token`` (e.g. a ServiceAccount token)."""
        if not self.apiserver_url:
            raise RuntimeError("no Kubernetes API server in this sandbox")
        dest = Path(path) if path else self.workdir / f"kubeconfig-{secrets.token_hex(4)}"
        return write_kubeconfig(dest, self.apiserver_url, token, self.ca_file, namespace=namespace)

    def kube_client(self, token: str | None = None) -> KubeClient:
        """A KubeClient for this API server, as admin or with the given token."""
        if not self.apiserver_url:
            raise RuntimeError("no Kubernetes API server in this sandbox")
        if token is None and self.kube is not None:
            return self.kube
        return KubeClient(self.apiserver_url, token or self.admin_token, self.ca_file)

    def gitea_client(self, token: str | None = None) -> GiteaAPI:
        """A GiteaAPI for this instance (admin token unless another token is given)."""
        if not self.gitea_url:
            raise RuntimeError("no Gitea in this sandbox")
        return GiteaAPI(self.gitea_url, token or self.gitea_token)

    def use_harness_node(self, enabled: bool = True) -> None:
        """Make the harness node the only schedulable node (or switch back to kwok).

        Cordons ``kwok-node-0`` and uncordons ``e2e-node-0`` (or the reverse), so
        pods the operator creates afterwards land where the test harness runs them.
        """
        assert self.kube and self.with_harness_node
        self.kube.patch(f"/api/v1/nodes/{KWOK_NODE}", {"spec": {"unschedulable": enabled}})
        self.kube.patch(f"/api/v1/nodes/{HARNESS_NODE}", {"spec": {"unschedulable": not enabled}})

    # ------------------------------------------------------------------ gitea
    def _start_gitea(self) -> None:
        gdir = self.workdir / "gitea"
        for sub in ("custom/conf", "data", "repos", "log"):
            (gdir / sub).mkdir(parents=True, exist_ok=True)
        self.gitea_dir = gdir
        conf = gdir / "custom/conf/app.ini"
        self.gitea_config = conf
        settings: dict[str, dict[str, str]] = {
            "": {
                "APP_NAME": "gro-testbed",
                "RUN_USER": getpass.getuser(),
                "RUN_MODE": "prod",
                "WORK_PATH": str(gdir),
            },
            "server": {
                "PROTOCOL": "http",
                "HTTP_ADDR": "127.0.0.1",
                "DOMAIN": "127.0.0.1",
                "DISABLE_SSH": "true",
                "START_SSH_SERVER": "false",
                "OFFLINE_MODE": "true",
                "LFS_START_SERVER": "false",
                "STATIC_ROOT_PATH": str(self._gitea_static),
                "APP_DATA_PATH": str(gdir / "data"),
            },
            "database": {
                "DB_TYPE": "sqlite3",
                "PATH": str(gdir / "data" / "gitea.db"),
                "SQLITE_JOURNAL_MODE": "WAL",
            },
            "repository": {"ROOT": str(gdir / "repos"), "DEFAULT_BRANCH": "main"},
            "security": {
                "INSTALL_LOCK": "true",
                "SECRET_KEY": secrets.token_hex(32),
                "INTERNAL_TOKEN": secrets.token_urlsafe(64),
            },
            "oauth2": {"JWT_SECRET": secrets.token_urlsafe(32)[:43]},
            "service": {
                "DISABLE_REGISTRATION": "true",
                "REQUIRE_SIGNIN_VIEW": "false",
                "ENABLE_NOTIFY_MAIL": "false",
            },
            "mailer": {"ENABLED": "false"},
            "picture": {"DISABLE_GRAVATAR": "true", "ENABLE_FEDERATED_AVATAR": "false"},
            "session": {"PROVIDER": "memory"},
            "cache": {"ADAPTER": "memory"},
            "queue": {"TYPE": "channel"},
            "indexer": {"ISSUE_INDEXER_TYPE": "db", "REPO_INDEXER_ENABLED": "false"},
            "cron.update_checker": {"ENABLED": "false"},
            # Lost runners (README, "Lost runners"): Gitea fails a task without updates after
            # ZOMBIE_TASK_TIMEOUT, checked by its cron; short here so a test sees it in seconds.
            # Runners update a running task every few seconds (the stand-in: every 10 s).
            "actions": {"ENABLED": "true", "ZOMBIE_TASK_TIMEOUT": "30s"},
            "cron.stop_zombie_tasks": {
                "ENABLED": "true",
                "RUN_AT_START": "true",
                "SCHEDULE": "@every 5s",
            },
            "webhook": {"ALLOWED_HOST_LIST": "loopback", "DELIVER_TIMEOUT": "5"},
            "api": {"ENABLE_SWAGGER": "false"},
            "log": {"MODE": "console", "LEVEL": "Info", "ROOT_PATH": str(gdir / "log")},
        }
        if os.geteuid() == 0:
            settings[""]["I_AM_BEING_UNSAFE_RUNNING_AS_ROOT"] = "true"
        for section, values in self.gitea_settings.items():
            settings.setdefault(section, {}).update(values)
        # For the setup commands; the web server's port is chosen again as it starts.
        self._write_gitea_config(settings, free_port())
        env = dict(
            os.environ, GITEA_WORK_DIR=str(gdir), GITEA_CUSTOM=str(gdir / "custom"), HOME=str(gdir)
        )
        self._gitea_env = env
        gitea = str(self.bin["gitea"])
        common = ["--config", str(conf), "--work-path", str(gdir)]
        self._run("gitea-setup", [gitea, *common, "migrate"], env=env, timeout=300)
        self._run(
            "gitea-setup",
            [
                gitea,
                *common,
                "admin",
                "user",
                "create",
                "--admin",
                "--username",
                self.gitea_admin_username,
                "--password",
                self.gitea_admin_password,
                "--email",
                self.gitea_admin_email,
                "--must-change-password=false",
            ],
            env=env,
        )
        self.gitea_token = (
            self._run(
                "gitea-setup",
                [
                    gitea,
                    *common,
                    "admin",
                    "user",
                    "generate-access-token",
                    "--username",
                    self.gitea_admin_username,
                    "--token-name",
                    "gro-testbed",
                    "--scopes",
                    "all",
                    "--raw",
                ],
                env=env,
            )
            .strip()
            .splitlines()[-1]
            .strip()
        )
        (self.workdir / "gitea-token").write_text(self.gitea_token + "\n")
        self._serve_gitea(settings, [gitea, *common, "web"], env, gdir)

    def _write_gitea_config(self, settings: dict[str, dict[str, str]], port: int) -> None:
        assert self.gitea_config is not None
        self.gitea_url = f"http://127.0.0.1:{port}"
        settings["server"].update(HTTP_PORT=str(port), ROOT_URL=f"{self.gitea_url}/")
        lines: list[str] = []
        for section, values in settings.items():
            lines += [f"[{section}]"] if section else []
            lines += [f"{k} = {v}" for k, v in values.items()] + [""]
        self.gitea_config.write_text("\n".join(lines))

    def _serve_gitea(
        self, settings: dict[str, dict[str, str]], web: list[str], env: dict[str, str], gdir: Path
    ) -> None:
        """Start the web server on a port chosen just now, and wait until it answers with
        this sandbox's admin token.

        The setup commands before it take seconds (tens on a loaded machine); a port chosen
        before them could be chosen by another xdist worker's sandbox in the meantime, and
        when that one is a Gitea too, an anonymous probe (``/api/v1/version``) is answered
        by it while this one dies on "address already in use": the tests then spoke to the
        other instance, which knows none of this sandbox's tokens ("token is required",
        seen once in a full run). ``/api/v1/user`` with this sandbox's token answers only
        from its own Gitea; a lost bind is tried again on a new port."""
        for attempt in range(1, 4):
            self._write_gitea_config(settings, free_port())
            port = settings["server"]["HTTP_PORT"]
            self._spawn("gitea", [*web, "--port", port], env=env, cwd=gdir)
            try:
                self._wait("gitea", self._gitea_answers_own_token, 120, "gitea /api/v1/user")
                return
            except StartupError:
                if attempt == 3 or "address already in use" not in self.log_tail("gitea"):
                    raise

    def _gitea_answers_own_token(self) -> bool:
        assert self.gitea_url and self.gitea_token
        user = GiteaAPI(self.gitea_url, self.gitea_token).request("GET", "/user", timeout=5)
        return isinstance(user, dict) and user.get("login") == self.gitea_admin_username

    def gitea_cli(self, *args: str) -> str:
        """Run a ``gitea`` admin subcommand against this instance's config; return stdout."""
        assert self.gitea_config and self.gitea_dir
        return self._run(
            "gitea-cli",
            [
                str(self.bin["gitea"]),
                "--config",
                str(self.gitea_config),
                "--work-path",
                str(self.gitea_dir),
                *args,
            ],
            env=self._gitea_env,
        )

    # ------------------------------------------------------------------ state
    def info(self) -> dict[str, Any]:
        """Everything a test or a shell needs to reach the peers (also the state file)."""
        return {
            "workdir": str(self.workdir),
            "kubeconfig": str(self.kubeconfig) if self.kubeconfig else None,
            "apiserver_url": self.apiserver_url,
            "ca_file": str(self.ca_file) if self.ca_file else None,
            "admin_token": self.admin_token,
            "gitea_url": self.gitea_url,
            "gitea_admin_username": self.gitea_admin_username,
            "gitea_admin_password": self.gitea_admin_password,
            "gitea_token": self.gitea_token,
            "gitea_token_file": str(self.workdir / "gitea-token") if self.gitea_token else None,
            "logs": {k: str(v) for k, v in self.logs.items()},
            "pids": {k: p.pid for k, p in self.processes.items()},
            "startup_seconds": self.startup_seconds,
            "kwok_node": KWOK_NODE if self.kube_mode == "local" else None,
            "harness_node": HARNESS_NODE if self.with_harness_node else None,
        }

    @property
    def state_file(self) -> Path:
        """JSON file with :meth:`info` (written after a successful start)."""
        return self.workdir / "state.json"

    def _write_state(self) -> None:
        self.state_file.write_text(json.dumps(self.info(), indent=2))

    def env(self) -> dict[str, str]:
        """Environment variables pointing a shell or a child process at this sandbox."""
        out: dict[str, str] = {"GRO_TESTBED_WORKDIR": str(self.workdir)}
        if self.kubeconfig:
            out["KUBECONFIG"] = str(self.kubeconfig)
        if self.gitea_url:
            out["GITEA_URL"] = self.gitea_url
            out["GITEA_TOKEN"] = self.gitea_token or ""
        return out
