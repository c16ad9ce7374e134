"""Play kubelet for the harness node: run runner Pods as real host processes.

Why: kwok fakes pods (they "run" nothing), but an end-to-end test must show that
a runner Pod the operator creates really registers with Gitea, takes a job and
goes away. There is no container runtime here, so this harness watches pods
bound to ``e2e-node-0`` (a node no kwok instance runs pods on), resolves the
runner container's environment (the first with GITEA_* env, else the first)
the way a kubelet would (``value``, ``valueFrom.secretKeyRef``/``configMapKeyRef``/
``fieldRef``, ``envFrom``), and
does what the runner image's entrypoint (``images.RUNNER_ENTRYPOINT``) does, on the host:

1. ``<runner> register --no-interactive [--ephemeral] --instance $GITEA_INSTANCE_URL
   --token $GITEA_RUNNER_REGISTRATION_TOKEN --name $GITEA_RUNNER_NAME (default: pod name)
   --labels <GITEA_RUNNER_LABELS rewritten to host mode, e.g. ubuntu:host>``, with the
   runner container's env; when the Pod has the ``gro-register`` init container (host
   mode), its own command instead (the operator's script, with ``gitea-runner`` on PATH),
   with that container's env
2. ``<runner> daemon --config <config with the cache server disabled> [--once]``, with the
   runner container's env (so in host mode the steps get no registration token, as in a
   real Pod); ``--once`` when ``GITEA_RUNNER_ONCE`` is non-empty, as in the entrypoint

The Pod's status goes Running when the process starts and Succeeded/Failed from
the exit code (``PATCH pods/<name>/status``). A Pod that gets a deletionTimestamp
has its process group stopped and is then removed with grace period 0, as a
kubelet does. The container's image/command/args are ignored.

The runner binary is the testbed's runner (``gro-testbed-runner``, on the official engine
``gitea.com/gitea/act``), or ``$GRO_TESTBED_RUNNER_BIN`` when set
(:mod:`tests.testbed.runners`).
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import runners
from .kube import KubeClient, KubeError
from .sandbox import _die_with_parent

HARNESS_NODE = "e2e-node-0"

RUNNER_CONFIG = """\
log:
  level: info
runner:
  file: .runner
  capacity: 1
  timeout: 30m
  fetch_interval: 2s
cache:
  enabled: false
"""


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def host_mode_labels(labels: str) -> str:
    """Rewrite runner labels so every one runs on the host: ``x:docker://img`` -> ``x:host``."""
    out = []
    for raw in labels.split(","):
        raw = raw.strip()
        if not raw:
            continue
        name = raw
        m = re.match(r"^(.*?):(host|docker://.*|kubernetes://.*|lxc://.*)$", raw)
        if m:
            name = m.group(1)
        out.append(f"{name}:host")
    return ",".join(out)


def runner_binary() -> Path:
    """The runner to execute (see :mod:`tests.testbed.runners`)."""
    return runners.resolve().path


def _field_ref(pod: dict[str, Any], path: str) -> str:
    meta = pod.get("metadata", {})
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": pod.get("spec", {}).get("nodeName", ""),
        "spec.serviceAccountName": pod.get("spec", {}).get("serviceAccountName", ""),
        "status.podIP": "127.0.0.1",
        "status.hostIP": "127.0.0.1",
    }
    if path in simple:
        return str(simple[path])
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if m:
        return str(meta.get(m.group(1), {}).get(m.group(2), ""))
    raise ValueError(f"unsupported fieldRef {path!r}")


def resolve_env(kube: KubeClient, pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """The container's environment as a kubelet would compute it (envFrom, then env)."""
    ns = pod["metadata"]["namespace"]
    cache: dict[tuple[str, str], dict[str, str] | None] = {}

    def source(kind: str, name: str) -> dict[str, str] | None:
        key = (kind, name)
        if key not in cache:
            try:
                obj = kube.get(f"/api/v1/namespaces/{ns}/{kind}/{name}")
            except KubeError as e:
                if e.status != 404:
                    raise
                obj = None
            if obj is None:
                cache[key] = None
            elif kind == "secrets":
                data = {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
                data.update(obj.get("stringData") or {})
                cache[key] = data
            else:
                cache[key] = dict(obj.get("data") or {})
        return cache[key]

    env: dict[str, str] = {}
    for ef in container.get("envFrom") or []:
        prefix = ef.get("prefix", "")
        for kind, ref_key in (("secrets", "secretRef"), ("configmaps", "configMapRef")):
            ref = ef.get(ref_key)
            if ref:
                data = source(kind, ref["name"])
                if data is None and not ref.get("optional"):
                    raise LookupError(f"{kind}/{ref['name']} not found for envFrom")
                for k, v in (data or {}).items():
                    env[prefix + k] = v
    for e in container.get("env") or []:
        name = e["name"]
        if "value" in e:
            # $(VAR) references to earlier variables, as the kubelet expands them
            env[name] = re.sub(
                r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), e["value"]
            )
            continue
        vf = e.get("valueFrom") or {}
        if not vf:
            env[name] = ""
        elif "fieldRef" in vf:
            env[name] = _field_ref(pod, vf["fieldRef"]["fieldPath"])
        else:
            for kind, ref_key in (("secrets", "secretKeyRef"), ("configmaps", "configMapKeyRef")):
                ref = vf.get(ref_key)
                if ref is None:
                    continue
                data = source(kind, ref["name"])
                if data is None or ref["key"] not in data:
                    if ref.get("optional"):
                        break
                    raise LookupError(f"{kind}/{ref['name']} key {ref['key']} not found for {name}")
                env[name] = data[ref["key"]]
                break
            else:
                raise ValueError(f"unsupported valueFrom for {name}: {vf}")
    return env


def runner_container(pod: dict[str, Any]) -> dict[str, Any]:
    """The container that runs the runner: the first one with Gitea runner env, else the first."""
    containers: list[dict[str, Any]] = pod["spec"]["containers"]
    for c in containers:
        names = {e.get("name") for e in c.get("env") or []}
        if names & {
            "GITEA_INSTANCE_URL",
            "GITEA_RUNNER_REGISTRATION_TOKEN",
            "GITEA_RUNNER_REGISTRATION_TOKEN_FILE",
        }:
            return c
    return containers[0]


def register_container(pod: dict[str, Any]) -> dict[str, Any] | None:
    """Host mode's init container that registers the runner before the runner starts."""
    for c in pod["spec"].get("initContainers") or []:
        if c.get("name") == "gro-register":
            return c
    return None


def read_mounted_file(
    kube: KubeClient, pod: dict[str, Any], container: dict[str, Any], path: str
) -> str:
    """Read ``path`` as the container would see it through a Secret/ConfigMap volume.

    Why: the act_runner image also takes ``GITEA_RUNNER_REGISTRATION_TOKEN_FILE``,
    typically a mounted Secret; there is no mount on the host, so the harness
    looks the key up in the API instead.
    """
    ns = pod["metadata"]["namespace"]
    volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    for m in container.get("volumeMounts") or []:
        mount = m["mountPath"].rstrip("/")
        if not path.startswith(mount + "/"):
            continue
        rel = path[len(mount) + 1 :]
        if m.get("subPath"):
            rel = m["subPath"]
        vol = volumes.get(m["name"], {})
        if "secret" in vol:
            src, kind, name = vol["secret"], "secrets", vol["secret"]["secretName"]
        elif "configMap" in vol:
            src, kind, name = vol["configMap"], "configmaps", vol["configMap"]["name"]
        else:
            raise ValueError(f"{path}: volume {m['name']} is neither a Secret nor a ConfigMap")
        key = next((i["key"] for i in src.get("items") or [] if i["path"] == rel), rel)
        obj = kube.get(f"/api/v1/namespaces/{ns}/{kind}/{name}")
        if kind == "secrets":
            if key in (obj.get("stringData") or {}):
                return str(obj["stringData"][key])
            return base64.b64decode(obj["data"][key]).decode()
        return str(obj["data"][key])
    return Path(path).read_text()  # not under a mount: a host path


@dataclass
class RunnerProcess:
    """One pod being 'run' by the harness."""

    namespace: str
    name: str
    uid: str
    workdir: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    exit_code: int | None = None
    thread: threading.Thread | None = None
    stopped: threading.Event = field(default_factory=threading.Event)
    # Set by kill(oom=True): the final status says OOMKilled, as a kubelet would.
    oom: bool = False


class KubeletHarness:
    """Watch pods on the harness node and run them as host processes.

    ``instance_url`` (optional) replaces ``GITEA_INSTANCE_URL`` from the pod
    (useful when the operator passes an in-cluster URL). ``poll`` is the pod
    list interval in seconds. Use as a context manager or ``start()/stop()``.
    """

    def __init__(
        self,
        kube: KubeClient,
        workdir: str | os.PathLike[str] | None = None,
        node_name: str = HARNESS_NODE,
        instance_url: str | None = None,
        runner: str | os.PathLike[str] | None = None,
        poll: float = 0.5,
    ) -> None:
        self.kube = kube
        self.node_name = node_name
        self.instance_url = instance_url
        self.runner = Path(runner) if runner else runner_binary()
        self.poll = poll
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="gro-harness-"))
        self.pods: dict[str, RunnerProcess] = {}  # by pod uid
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> KubeletHarness:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> KubeletHarness:
        """Start the watch loop in a daemon thread."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._loop, name="kubelet-harness", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the loop and every runner process group (SIGTERM, then SIGKILL).

        A work directory the harness made itself is removed unless GRO_TESTBED_KEEP=1.
        """
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)
        with self._lock:
            procs = list(self.pods.values())
        for rp in procs:
            self._kill(rp)
        for rp in procs:
            if rp.thread:
                rp.thread.join(timeout=15)
        if os.environ.get("GRO_TESTBED_KEEP", "") in ("", "0"):
            self.cleanup()

    # ------------------------------------------------------------------ loop
    def _loop(self) -> None:
        selector = urllib.parse.quote(f"spec.nodeName={self.node_name}")
        while not self._stop.is_set():
            try:
                pods = self.kube.request("GET", f"/api/v1/pods?fieldSelector={selector}")["items"]
                for pod in pods:
                    self._sync(pod)
                self._stop_unlisted({p["metadata"]["uid"] for p in pods})
            except Exception as e:
                self.errors.append(repr(e))
            self._stop.wait(self.poll)

    def _sync(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        with self._lock:
            rp = self.pods.get(uid)
        if meta.get("deletionTimestamp"):
            if rp is not None:
                self._kill(rp)
                if rp.thread:
                    rp.thread.join(timeout=15)
            self.kube.delete(
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                {
                    "apiVersion": "v1",
                    "kind": "DeleteOptions",
                    "gracePeriodSeconds": 0,
                    "preconditions": {"uid": uid},
                },
            )
            return
        if rp is not None or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            return
        d = self.workdir / f"{meta['namespace']}-{meta['name']}"
        d.mkdir(parents=True, exist_ok=True)
        rp = RunnerProcess(meta["namespace"], meta["name"], uid, d, d / "runner.log")
        with self._lock:
            self.pods[uid] = rp
        rp.thread = threading.Thread(
            target=self._run_pod, args=(pod, rp), daemon=True, name=f"pod-{meta['name']}"
        )
        rp.thread.start()

    def _stop_unlisted(self, listed: set[str]) -> None:
        """A Pod gone from the API server (force-deleted, e.g. by the Pod garbage collector
        after its node vanished) has its processes stopped, as a kubelet stops Pods no longer
        bound to it."""
        with self._lock:
            gone = [rp for uid, rp in self.pods.items() if uid not in listed]
        for rp in gone:
            if rp.proc is not None and rp.proc.poll() is None and not rp.stopped.is_set():
                self._kill(rp)

    def kill(self, name: str, *, oom: bool = False) -> None:
        """SIGKILL a Pod's runner process, as the OOM killer (``oom``) or a crash would; the
        Pod then fails with exit code 137 (reason ``OOMKilled`` or ``Error``).

        Why a stand-in: without a container runtime there is no cgroup memory limit to hit,
        so the OOM case is the kubelet's report of it, not a real OOM kill."""
        with self._lock:
            (rp,) = [p for p in self.pods.values() if p.name == name]
        rp.oom = oom
        if rp.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(rp.proc.pid, signal.SIGKILL)

    def _kill(self, rp: RunnerProcess) -> None:
        rp.stopped.set()
        p = rp.proc
        if p is None or p.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)

    # ------------------------------------------------------------------ one pod
    def _status(
        self,
        rp: RunnerProcess,
        pod: dict[str, Any],
        phase: str,
        exit_code: int | None = None,
        message: str = "",
    ) -> None:
        now = _now()
        running = phase == "Running"
        state: dict[str, Any]
        if running:
            state = {"running": {"startedAt": now}}
        else:
            state = {
                "terminated": {
                    "exitCode": exit_code if exit_code is not None else 1,
                    "reason": "Completed"
                    if phase == "Succeeded"
                    else ("OOMKilled" if rp.oom else "Error"),
                    "message": message[:1000],
                    "startedAt": now,
                    "finishedAt": now,
                }
            }
        ready = "True" if running else "False"
        status = {
            "phase": phase,
            "hostIP": "127.0.0.1",
            "podIP": "127.0.0.1",
            "startTime": pod.get("status", {}).get("startTime") or now,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": ready, "lastTransitionTime": now},
                {"type": "Ready", "status": ready, "lastTransitionTime": now},
            ],
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": running,
                    "started": running,
                    "restartCount": 0,
                    "state": state,
                }
                for c in pod["spec"]["containers"]  # sidecars share the runner's fate
            ],
        }
        try:
            self.kube.patch(
                f"/api/v1/namespaces/{rp.namespace}/pods/{rp.name}/status", {"status": status}
            )
        except KubeError as e:
            if e.status != 404:
                raise

    def _run_pod(self, pod: dict[str, Any], rp: RunnerProcess) -> None:
        try:
            self._run_pod_inner(pod, rp)
        except Exception as e:
            self.errors.append(f"{rp.namespace}/{rp.name}: {e!r}")
            with contextlib.suppress(Exception):
                self._status(rp, pod, "Failed", 1, message=repr(e))

    def _run_pod_inner(self, pod: dict[str, Any], rp: RunnerProcess) -> None:
        container = runner_container(pod)
        penv = resolve_env(self.kube, pod, container)
        # Registration runs with the env of the init container that does it, when there is
        # one (host mode), else with the runner container's (the image's entrypoint).
        registrar = register_container(pod) or container
        renv = penv if registrar is container else resolve_env(self.kube, pod, registrar)
        instance = self.instance_url or renv.get("GITEA_INSTANCE_URL", "")
        token = renv.get("GITEA_RUNNER_REGISTRATION_TOKEN", "")
        if not token and renv.get("GITEA_RUNNER_REGISTRATION_TOKEN_FILE"):
            token = read_mounted_file(
                self.kube, pod, registrar, renv["GITEA_RUNNER_REGISTRATION_TOKEN_FILE"]
            ).strip()
        name = renv.get("GITEA_RUNNER_NAME") or rp.name
        labels = host_mode_labels(renv.get("GITEA_RUNNER_LABELS", ""))
        # any non-empty value, like the image's entrypoint
        ephemeral = bool(renv.get("GITEA_RUNNER_EPHEMERAL"))
        if registrar is not container:
            ephemeral = ephemeral or "--ephemeral" in " ".join(registrar.get("command") or [])
        if not instance or not token:
            raise ValueError("pod has no GITEA_INSTANCE_URL / GITEA_RUNNER_REGISTRATION_TOKEN")
        (rp.workdir / "config.yaml").write_text(RUNNER_CONFIG)
        register_env = {**os.environ, **renv, "HOME": str(rp.workdir)}
        env = {**os.environ, **penv, "HOME": str(rp.workdir)}
        self._status(rp, pod, "Running")
        with open(rp.log, "ab") as log:
            reg = [
                str(self.runner),
                "register",
                "--no-interactive",
                "--instance",
                instance,
                "--token",
                token,
                "--name",
                name,
                "--labels",
                labels,
                "--config",
                "config.yaml",
            ]
            if ephemeral:
                reg.insert(3, "--ephemeral")
            if registrar is not container and registrar.get("command"):
                # Host mode: run the operator's own registration command (the init
                # container's shell script), so it is tested against the session's runner.
                reg = [*registrar["command"], *(registrar.get("args") or [])]
                register_env.update(
                    PATH=f"{self._runner_dir()}{os.pathsep}{register_env.get('PATH', '')}",
                    GITEA_INSTANCE_URL=instance,
                    GITEA_RUNNER_REGISTRATION_TOKEN=token,
                    GITEA_RUNNER_NAME=name,
                    GITEA_RUNNER_LABELS=labels,
                    CONFIG_FILE="config.yaml",
                )
            daemon = [str(self.runner), "daemon", "--config", "config.yaml"]
            if penv.get("GITEA_RUNNER_ONCE"):  # any non-empty value, like the entrypoint
                daemon.append("--once")
            for argv, argv_env in ((reg, register_env), (daemon, env)):
                if rp.stopped.is_set():
                    break
                log.write(
                    ("$ " + " ".join(a if a != token else "***" for a in argv) + "\n").encode()
                )
                log.flush()
                rp.proc = subprocess.Popen(
                    argv,
                    cwd=rp.workdir,
                    env=argv_env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,  # runner dies with this test process
                )
                rp.exit_code = rp.proc.wait()
                if rp.exit_code < 0:  # killed by a signal: 128 + n, as a container runtime says
                    rp.exit_code = 128 - rp.exit_code
                if rp.exit_code != 0:
                    break
        if rp.stopped.is_set():
            return  # the pod is being deleted; the loop removes it
        tail = "\n".join(rp.log.read_text(errors="replace").splitlines()[-5:])
        self._status(
            rp, pod, "Succeeded" if rp.exit_code == 0 else "Failed", rp.exit_code, message=tail
        )

    def _runner_dir(self) -> Path:
        """A PATH directory where the runner answers to its image's name, ``gitea-runner``."""
        d = self.workdir / "bin"
        link = d / "gitea-runner"
        if not link.exists():
            d.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):  # two pods starting at once
                link.symlink_to(self.runner.resolve())
        return d

    def cleanup(self) -> None:
        """Remove the harness work directory (if it created it)."""
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def wait_pod_phase(
    kube: KubeClient, namespace: str, name: str, phases: tuple[str, ...], timeout: float = 60.0
) -> dict[str, Any]:
    """Poll a pod until its phase is one of ``phases``; return the pod."""
    deadline = time.monotonic() + timeout
    while True:
        pod = kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        if pod.get("status", {}).get("phase") in phases:
            return dict(pod)
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"pod {namespace}/{name} did not reach {phases}; is {pod.get('status')}"
            )
        time.sleep(0.25)
