"""A real Flux on the testbed, and kstatus: what GitOps tools see of the objects they apply.

Why: teams manage RunnerGroups by GitOps, and whether that works (a Kustomization with
``wait: true`` turning Ready, failing fast on a broken group, pruning cleanly) is decided by
Flux's own controllers and by kstatus (``sigs.k8s.io/cli-utils``), not by anything the
project can fake. So the testbed builds Flux's ``source-controller`` and
``kustomize-controller`` from their Go modules (:mod:`tests.testbed.build`, components
``flux-source`` and ``flux-kustomize``) and runs them as local processes against the
sandbox's API server, reading Git from the sandbox's Gitea; and it builds ``gro-kstatus``
(``go/kstatus``), a command line on kstatus itself.

Flux runs as a cluster admin (the sandbox's admin kubeconfig), with leader election off and
every listener on a free loopback port. source-controller serves the artifacts it packs
from Git on ``--storage-adv-addr``, a loopback address kustomize-controller downloads from.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from . import build
from .kube import KubeClient, wait_for
from .sandbox import Sandbox, free_port, http_ok

NAMESPACE = "flux-system"  # RUNTIME_NAMESPACE: where Flux records its events
CONTROLLERS = ("flux-source", "flux-kustomize")
SOURCE_API = "source.toolkit.fluxcd.io/v1"
KUSTOMIZE_API = "kustomize.toolkit.fluxcd.io/v1"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
FIELD_MANAGER = "gro-testbed"


def crd_files() -> list[Path]:
    """Flux's CRDs as the built controllers' own modules ship them (``config/crd/bases``),
    so the API the controllers serve is always the one they were built with."""
    files: list[Path] = []
    for comp in CONTROLLERS:
        files += sorted((build.component_dir(comp) / "static/config/crd/bases").glob("*.yaml"))
    if not files:
        raise FileNotFoundError("Flux's CRDs are not in the build cache: build flux-source")
    return files


def install_crds(kube: KubeClient, files: Iterable[Path], timeout: float = 60) -> list[str]:
    """Server-side apply each CRD (a re-install on a kept cluster updates it in place) and
    wait until the API server serves it; returns the CRDs' names."""
    names: list[str] = []
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            name = doc["metadata"]["name"]
            kube.request(
                "PATCH",
                f"{CRD_PATH}/{name}",
                doc,
                content_type="application/apply-patch+yaml",
                query={"fieldManager": FIELD_MANAGER, "force": "true"},
            )
            names.append(name)
    for name in names:
        wait_for(
            lambda n=name: condition(kube.get(f"{CRD_PATH}/{n}"), "Established") == "True",
            timeout,
            what=f"CRD {name} established",
        )
    return names


def condition(obj: dict[str, Any], ctype: str) -> str | None:
    """The status ("True", "False", "Unknown") of one condition, None when absent."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return str(c.get("status"))
    return None


def condition_of(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    """One whole condition (reason, message, ...), {} when absent."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return dict(c)
    return {}


class Flux:
    """source-controller and kustomize-controller running against ``sandbox``.

    ``start()`` builds what is missing, installs the CRDs, creates ``flux-system`` and
    starts both controllers, returning once each answers ``/readyz``; ``stop()`` stops them
    (the sandbox's own stop does too). Logs: ``<workdir>/logs/flux-*.log``.
    """

    def __init__(self, sandbox: Sandbox) -> None:
        if sandbox.kube is None or sandbox.kubeconfig is None:
            raise ValueError("Flux needs the sandbox's Kubernetes API server")
        self.sandbox = sandbox
        self.kube: KubeClient = sandbox.kube
        self.storage = sandbox.workdir / "flux" / "storage"
        self.artifact_addr: str | None = None
        self.startup_seconds: float | None = None
        self.crds: list[str] = []

    def start(self) -> Flux:
        """Build, install the CRDs, start both controllers and wait until they are ready."""
        t0 = time.monotonic()
        built = build.ensure_built(list(CONTROLLERS))
        self.crds = install_crds(self.kube, crd_files())
        if not self.kube.exists(f"/api/v1/namespaces/{NAMESPACE}"):
            self.kube.post(
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            )
        self.storage.mkdir(parents=True, exist_ok=True)
        self.artifact_addr = f"127.0.0.1:{free_port()}"
        self._start(
            "flux-source-controller",
            built["flux-source"] / "bin" / "source-controller",
            [
                f"--storage-path={self.storage}",
                f"--storage-addr={self.artifact_addr}",
                f"--storage-adv-addr={self.artifact_addr}",
            ],
        )
        self._start(
            "flux-kustomize-controller",
            built["flux-kustomize"] / "bin" / "kustomize-controller",
            # a Kustomization whose source has no artifact yet is retried after this
            # (default 30 s); the tests create both at once
            ["--no-remote-bases=true", "--requeue-dependency=5s"],
        )
        self.startup_seconds = round(time.monotonic() - t0, 1)
        return self

    def _start(self, name: str, exe: Path, extra: list[str]) -> None:
        health = f"127.0.0.1:{free_port()}"
        argv = [
            str(exe),
            f"--metrics-addr=127.0.0.1:{free_port()}",
            f"--health-addr={health}",
            "--enable-leader-election=false",
            "--log-level=info",
            "--log-encoding=console",
            *extra,
        ]
        home = self.sandbox.workdir / "flux" / "home"
        home.mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "KUBECONFIG": str(self.sandbox.kubeconfig),
            "RUNTIME_NAMESPACE": NAMESPACE,
        }
        self.sandbox.spawn(name, argv, env=env)
        self.sandbox.wait_peer(
            name, lambda: http_ok(f"http://{health}/readyz"), 60, f"{name} /readyz"
        )

    def stop(self) -> None:
        """Stop both controllers (what they applied stays in the cluster)."""
        for name in ("flux-kustomize-controller", "flux-source-controller"):
            if name in self.sandbox.processes:
                self.sandbox.terminate(name)

    def log(self, controller: str) -> str:
        """A controller's whole log (``source`` or ``kustomize``), for failure messages."""
        return self.sandbox.log_tail(f"flux-{controller}-controller", lines=10_000)

    # ------------------------------------------------------------------ objects
    def git_url(self, owner: str, repo: str) -> str:
        """The HTTP clone URL of a repository on the sandbox's Gitea."""
        assert self.sandbox.gitea_url
        return f"{self.sandbox.gitea_url}/{owner}/{repo}.git"

    def basic_auth_secret(self, namespace: str, name: str) -> dict[str, Any]:
        """A Secret with the Gitea admin's user name and password, as a GitRepository's
        ``secretRef`` for HTTP basic auth reads it; created in ``namespace``."""
        sb = self.sandbox
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "type": "Opaque",
            "stringData": {
                "username": sb.gitea_admin_username,
                "password": sb.gitea_admin_password,
            },
        }
        return dict(self.kube.post(f"/api/v1/namespaces/{namespace}/secrets", secret))

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply one Flux object (GitRepository, Kustomization) as the test."""
        plural = {"GitRepository": "gitrepositories", "Kustomization": "kustomizations"}
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        path = f"/apis/{obj['apiVersion']}/namespaces/{ns}/{plural[obj['kind']]}/{name}"
        out = self.kube.request(
            "PATCH",
            path,
            obj,
            content_type="application/apply-patch+yaml",
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
        )
        return dict(out)

    def reconcile_now(self, api: str, plural: str, namespace: str, name: str) -> None:
        """Ask Flux to reconcile at once, as ``flux reconcile`` does: set the
        ``reconcile.fluxcd.io/requestedAt`` annotation (the controllers watch it) instead of
        waiting for the object's interval."""
        stamp = datetime.now(UTC).isoformat()
        self.kube.patch(
            f"/apis/{api}/namespaces/{namespace}/{plural}/{name}",
            {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": stamp}}},
        )

    def wait_ready(
        self,
        api: str,
        plural: str,
        namespace: str,
        name: str,
        timeout: float = 60,
        until: Callable[[dict[str, Any]], bool] | None = None,
    ) -> dict[str, Any]:
        """Wait until the object's ``Ready`` condition is True for its current generation
        (and ``until(obj)`` holds, e.g. a given revision applied); return the object.
        A timeout names the object's last conditions and the controllers' log tails."""
        path = f"/apis/{api}/namespaces/{namespace}/{plural}/{name}"
        last: dict[str, Any] = {}

        def ready() -> dict[str, Any] | None:
            nonlocal last
            last = self.kube.get(path)
            st = last.get("status") or {}
            if st.get("observedGeneration") != last["metadata"].get("generation"):
                return None
            if until is not None and not until(last):
                return None
            return last if condition(last, "Ready") == "True" else None

        try:
            return dict(wait_for(ready, timeout, what=f"{plural}/{name} Ready"))
        except TimeoutError as e:
            conds = json.dumps((last.get("status") or {}).get("conditions"), indent=1)
            raise AssertionError(
                f"{e}; conditions: {conds}\n--- source-controller ---\n"
                f"{self.sandbox.log_tail('flux-source-controller', 15)}\n"
                f"--- kustomize-controller ---\n"
                f"{self.sandbox.log_tail('flux-kustomize-controller', 15)}"
            ) from None


def git_repository(
    namespace: str, name: str, url: str, secret: str | None = None, interval: str = "10m"
) -> dict[str, Any]:
    """A GitRepository on branch ``main``. The interval is long on purpose: the tests ask for
    each reconcile (:meth:`Flux.reconcile_now`), so nothing depends on polling luck."""
    spec: dict[str, Any] = {"url": url, "interval": interval, "ref": {"branch": "main"}}
    if secret:
        spec["secretRef"] = {"name": secret}
    return {
        "apiVersion": SOURCE_API,
        "kind": "GitRepository",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def kustomization(
    namespace: str,
    name: str,
    source: str,
    path: str,
    *,
    timeout: str = "1m",
    interval: str = "10m",
    wait: bool = True,
    prune: bool = True,
) -> dict[str, Any]:
    """A Kustomization applying ``path`` of GitRepository ``source``, with health checks of
    everything it applies (``wait``) and garbage collection of what left Git (``prune``)."""
    return {
        "apiVersion": KUSTOMIZE_API,
        "kind": "Kustomization",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "interval": interval,
            "timeout": timeout,
            "retryInterval": "5s",
            "path": path,
            "prune": prune,
            "wait": wait,
            "sourceRef": {"kind": "GitRepository", "name": source},
        },
    }


# ---------------------------------------------------------------------- kstatus
def kstatus_binary() -> Path:
    """``gro-kstatus``, built when missing (a few seconds warm, about a minute cold)."""
    build.ensure_built(["kstatus"])
    return build.binary("gro-kstatus")


def kstatus(*objects: dict[str, Any], exe: Path | None = None) -> list[dict[str, Any]]:
    """What kstatus computes for each object: ``{"status": "Current"|"InProgress"|"Failed"|
    ..., "message": ..., "conditions": [...]}``, in order."""
    doc = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
    out = subprocess.run(
        [str(exe or kstatus_binary()), "-o", "json"],
        input=json.dumps(doc),
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    if out.returncode != 0:
        raise RuntimeError(f"gro-kstatus failed ({out.returncode}): {out.stderr}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
