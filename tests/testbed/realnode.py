"""One real Kubernetes node beside kwok: the kubelet, containerd with runc, a CNI bridge.

Why: kwok fakes Pods, so it proves nothing about the runner Pod the operator renders (the
image's entrypoint, native sidecar ordering, Docker-in-Docker, security contexts, SIGTERM,
OOM kills, pull failures). This module joins a real kubelet (built by the testbed from
``k8s.io/kubernetes``) to the sandbox's control plane, with Debian's containerd, runc and CNI
plugins and images imported from local tarballs (:mod:`tests.testbed.images`); no registry.
containerd 2.x and runc are built by the testbed from their Go modules (components
``containerd`` and ``runc``): a Pod with its own user namespace (``hostUsers: false``) needs
containerd >= 2.0 and runc >= 1.2, newer than Debian's.

Every setting comes from ``shared/reference/real-pods.md``; the ones a reader would not guess:
containerd's CRI ``restrict_oom_score_adj`` (root here lacks CAP_SYS_RESOURCE, so a -998
score makes every sandbox fail), ``netns_mounts_under_state_dir`` (so clean-up finds them),
and the kube-apiserver's ``--kubelet-preferred-address-types InternalIP`` (set by the
sandbox) for ``pods/log``.

Host state it touches, and that :func:`cleanup` always puts back (also at start, for what a
killed run left): processes (kubelet, containerd, shims, containers), mounts under its own
dirs and ``/var/lib/kubelet``, ``kubepods``/``k8s.io`` cgroups in every hierarchy, the CNI
bridge, ``/var/lib/kubelet`` and ``/var/lib/cni`` (when it created them), containerd's shim
sockets in ``/run/containerd``, and ``net.ipv4.ip_forward``. One real node per machine: a
lock file (``/run/gro-realnode.lock``) is held for the node's whole life.

The node's address is the bridge's gateway (``10.213.0.1``, a private /16 of its own), not
the machine's network: the API server reaches the kubelet there and Pods reach host services
there (:meth:`RealNode.expose` forwards a loopback port to it with socat).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from gitea_runner_operator.api.constants import USERNS_RUNTIME_CLASS

from . import build
from .kube import KubeClient, wait_for

NODE_NAME = "gro-real-node"
NODE_LABEL = "gro-testbed/real-node"
# Only Pods that tolerate it land on the real node; kwok manages only nodes labelled
# gro-testbed/kwok=true (or its one harness node), so it never touches this one.
NODE_TAINT = {"key": NODE_LABEL, "value": "true", "effect": "NoSchedule"}
BRIDGE = "gro-br0"
SUBNET = "10.213.0.0/16"
GATEWAY = "10.213.0.1"
# Locally administered (02:...), fixed: see RealNode._make_bridge.
BRIDGE_MAC = "02:67:72:6f:00:01"
LOCK_FILE = Path("/run/gro-realnode.lock")
LOCK_WAIT = 900.0  # another session's node: wait for it (a suite takes about 10 min)
STATE_DIR = Path("/run/gro-realnode")  # containerd state, sockets, netns, CNI conf
ROOT_DIR = Path("/var/lib/gro-realnode")  # containerd root, kubelet root
STATE_FILE = Path("/run/gro-realnode.state.json")  # what to put back; removed last
CNI_BIN = Path("/usr/lib/cni")
# Rootless Docker (slirp4netns) opens /dev/net/tun as its own user; without udev (as here)
# the device is root-only (0600). Opened up while the node runs, put back afterwards.
TUN = Path("/dev/net/tun")
CGROUP_NAMES = ("kubepods", "k8s.io")
# The containerd runtime handler of the RuntimeClass that mode dind-userns names (the sandbox
# makes the RuntimeClass, tests/testbed/sandbox.py): runc, with
# /dev/net/tun in its base spec, which the daemon's slirp4netns needs and an unprivileged
# Pod has no other way to get. What a platform configures on its nodes (docs/runners.md).
USERNS_HANDLER = USERNS_RUNTIME_CLASS
TUN_SPEC = STATE_DIR / "tun-base-spec.json"
# A runtime handler on Debian's runc 1.1.5, too old for user namespaces: containerd reports
# it without them, and the kubelet refuses a Pod with hostUsers: false there.
NO_USERNS_HANDLER = "runc-1-1"
DEBIAN_RUNC = Path("/usr/sbin/runc")
# Host paths the kubelet and CNI hard-code (device plugins, CNI cache, container log links).
HOST_PATHS = (Path("/var/lib/kubelet"), Path("/var/lib/cni"), Path("/var/log/containers"))
SHIM_DIR = Path("/run/containerd")
PACKAGES = (
    # runc's build needs cgo and libseccomp (containerd and runc come from Go modules)
    "libseccomp-dev",
    "pkg-config",
    # Debian's runc 1.1: the runtime handler NO_USERNS_HANDLER, a runtime without user
    # namespaces, as a node of an older cluster has
    "runc",
    "containernetworking-plugins",
    "umoci",
    "iptables",
    "conntrack",
    "socat",
    "mmdebstrap",
    "busybox-static",
)
REQUIRED_COMMANDS = ("umoci", "socat", "mmdebstrap", "ip", "gcc")


def log(msg: str) -> None:
    """Progress on stderr: the node's start and clean-up are the slow, stateful parts."""
    print(f"[real-node {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def missing_prerequisites() -> list[str]:
    """What this machine lacks to run the real node (empty: it can)."""
    missing: list[str] = []
    if not sys.platform.startswith("linux"):
        return ["Linux"]
    if os.geteuid() != 0:
        missing.append("root")
    missing += [c for c in REQUIRED_COMMANDS if shutil.which(c) is None]
    if not (CNI_BIN / "bridge").is_file():
        missing.append(f"{CNI_BIN}/bridge (containernetworking-plugins)")
    if not Path("/bin/busybox").is_file():
        missing.append("/bin/busybox (busybox-static)")
    if not DEBIAN_RUNC.is_file():
        missing.append(f"{DEBIAN_RUNC} (Debian's runc)")
    return missing


# ---------------------------------------------------------------------- clean-up


def _run(*argv: str, check: bool = False, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=timeout)


def _cgroup_mounts() -> list[Path]:
    mounts = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] in ("cgroup", "cgroup2"):
            mounts.append(Path(fields[1]))
    return mounts


def _our_cgroups() -> list[Path]:
    """Every kubepods / k8s.io cgroup directory, deepest first."""
    found: list[Path] = []
    for mount in _cgroup_mounts():
        for name in CGROUP_NAMES:
            top = mount / name
            if top.is_dir():
                found += [Path(d) for d, _, _ in os.walk(top)]
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def _kill_cgroup_members() -> None:
    for cg in _our_cgroups():
        with contextlib.suppress(OSError):
            for pid in (cg / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)


def _remove_cgroups() -> list[Path]:
    left: list[Path] = []
    for _ in range(20):
        _kill_cgroup_members()
        left = []
        for cg in _our_cgroups():
            try:
                cg.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                left.append(cg)
        if not left:
            return []
        time.sleep(0.25)
    return left


def _our_processes() -> list[int]:
    """Processes of a node: the kubelet and containerd started with our paths, and shims
    serving our containerd's socket (they outlive containerd by design)."""
    marks = (str(STATE_DIR), str(ROOT_DIR), f"bind={GATEWAY}")
    pids: list[int] = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if any(m in cmd for m in marks):
                pids.append(int(proc.name))
    return pids


def _kill_processes() -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = _our_processes()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 5
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if Path(f"/proc/{p}").exists() and not _is_zombie(p)]
            time.sleep(0.1)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _our_mounts() -> list[str]:
    prefixes = (str(STATE_DIR), str(ROOT_DIR), *(str(p) for p in HOST_PATHS))
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if any(point == p or point.startswith(p + "/") for p in prefixes):
            points.append(point)
    return sorted(set(points), key=len, reverse=True)


def _unmount_all() -> list[str]:
    for _ in range(5):
        points = _our_mounts()
        if not points:
            return []
        for point in points:
            _run("umount", "-l", point)
    return _our_mounts()


def cleanup(*, quiet: bool = False) -> list[str]:
    """Put the machine back as it was before any real node ran; returns what could not be
    undone (empty when all is clean). Safe to call any time, any number of times."""
    problems: list[str] = []
    state: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        state = json.loads(STATE_FILE.read_text())
    _kill_processes()
    left_cg = _remove_cgroups()
    problems += [f"cgroup {p}" for p in left_cg]
    problems += [f"mount {m}" for m in _unmount_all()]
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        _run("ip", "link", "delete", BRIDGE)
        if Path(f"/sys/class/net/{BRIDGE}").exists():
            problems.append(f"bridge {BRIDGE}")
    for path in HOST_PATHS:
        if path.exists() and state.get("created", {}).get(str(path), False):
            shutil.rmtree(path, ignore_errors=True)
    if SHIM_DIR.exists():
        before = set(state.get("shim_sockets_before", []))
        if state.get("created", {}).get(str(SHIM_DIR), False):
            shutil.rmtree(SHIM_DIR, ignore_errors=True)
        else:
            for sock in (SHIM_DIR / "s").glob("*"):
                if str(sock) not in before:
                    with contextlib.suppress(OSError):
                        sock.unlink()
    for path in (STATE_DIR, ROOT_DIR):
        shutil.rmtree(path, ignore_errors=True)
        if path.exists():
            problems.append(f"directory {path}")
    if "tun_mode" in state and TUN.exists():
        with contextlib.suppress(OSError):
            TUN.chmod(int(state["tun_mode"]))
    if "ip_forward" in state:
        with contextlib.suppress(OSError):
            Path("/proc/sys/net/ipv4/ip_forward").write_text(str(state["ip_forward"]))
    if not problems:
        with contextlib.suppress(FileNotFoundError):
            STATE_FILE.unlink()
    if state and not quiet:
        log("clean-up done" + (f"; left: {problems}" if problems else ": nothing left"))
    return problems


def cleanup_unless_running() -> list[str]:
    """:func:`cleanup`, unless a live real node holds the lock (then refuse: it is not a
    leftover)."""
    LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    with LOCK_FILE.open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return [f"a real node is running ({LOCK_FILE} is locked)"]
        return cleanup()


# ---------------------------------------------------------------------- the node


def _containerd_config(pause_image: str) -> str:
    """containerd config version 2 (containerd 2.x converts it to its version 3 on load),
    everything under our own paths; runc is the testbed's."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""\
version = 2
root = "{ROOT_DIR}/containerd"
state = "{STATE_DIR}/containerd"

[grpc]
  address = "{STATE_DIR}/containerd.sock"

[ttrpc]
  address = "{STATE_DIR}/containerd-ttrpc.sock"

[{cri}]
  sandbox_image = "{pause_image}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  enable_selinux = false

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  BinaryName = "{build.binary("runc")}"

[{cri}.containerd.runtimes.{USERNS_HANDLER}]
  runtime_type = "io.containerd.runc.v2"
  base_runtime_spec = "{TUN_SPEC}"

[{cri}.containerd.runtimes.{USERNS_HANDLER}.options]
  SystemdCgroup = false
  BinaryName = "{build.binary("runc")}"

[{cri}.containerd.runtimes.{NO_USERNS_HANDLER}]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.{NO_USERNS_HANDLER}.options]
  SystemdCgroup = false
  BinaryName = "{DEBIAN_RUNC}"

[{cri}.cni]
  bin_dir = "{CNI_BIN}"
  conf_dir = "{STATE_DIR}/cni"
"""


def _tun_base_spec() -> str:
    """containerd's default OCI spec plus /dev/net/tun (a character device 10:200, allowed
    in the device cgroup). In a Pod with its own user namespace runc bind-mounts the node's
    device, so its mode is the node's: 0666, as udev sets it (see TUN)."""
    spec = json.loads(_run(str(build.binary("ctr")), "oci", "spec", check=True).stdout)
    # ctr's RLIMIT_NOFILE of 1024 would be set for every container, and root here lacks
    # CAP_SYS_RESOURCE ("error setting rlimits ... operation not permitted"); the CRI's own
    # spec sets none.
    spec.get("process", {}).pop("rlimits", None)
    linux = spec.setdefault("linux", {})
    tun = {"type": "c", "major": 10, "minor": 200}
    linux.setdefault("devices", []).append(
        {"path": "/dev/net/tun", **tun, "fileMode": 0o666, "uid": 0, "gid": 0}
    )
    rules = linux.setdefault("resources", {}).setdefault("devices", [])
    rules.append({"allow": True, **tun, "access": "rwm"})
    return json.dumps(spec, indent=1)


def _cni_conflist() -> dict[str, Any]:
    from .sandbox import SERVICE_CIDR

    return {
        "cniVersion": "0.4.0",
        "name": "gro-realnode",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": SUBNET, "gateway": GATEWAY}]],
                    # Service ClusterIPs through the node (service_bridge.py answers the
                    # kubernetes Service there); Pods have no default route otherwise.
                    "routes": [{"dst": SERVICE_CIDR}],
                    "dataDir": f"{STATE_DIR}/cni-ipam",
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def _kubelet_config(port: int, healthz_port: int) -> str:
    return json.dumps(
        {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": GATEWAY,
            "port": port,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": healthz_port,
            "readOnlyPort": 0,
            "cgroupDriver": "cgroupfs",
            "failCgroupV1": False,
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{STATE_DIR}/containerd.sock",
            # loopback testbed only: the API server calls the kubelet (logs) without a cert
            "authentication": {
                "anonymous": {"enabled": True},
                "webhook": {"enabled": False},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "makeIPTablesUtilChains": False,
            # imported images cannot be pulled again: never collect them
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {},
            "podLogsDir": f"{ROOT_DIR}/pod-logs",  # not /var/log/pods
            "serializeImagePulls": False,
            "nodeStatusUpdateFrequency": "5s",
            "syncFrequency": "10s",
            "fileCheckFrequency": "60s",
            "maxPods": 20,
        },
        indent=2,
    )


class RealNode:
    """A started real node; ``start()`` / ``stop()``, or a context manager.

    ``kube``: an admin client of the control plane; ``kubeconfig``: the kubeconfig the
    kubelet uses (the sandbox's admin one: a loopback testbed); ``images``: tarballs from
    :func:`tests.testbed.images.ensure_images` to import (name -> path).
    """

    def __init__(
        self,
        kube: KubeClient,
        kubeconfig: Path,
        workdir: Path,
        images: dict[str, Path],
        pause_image: str,
    ) -> None:
        self.kube = kube
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.images = images
        self.pause_image = pause_image
        self.logs: dict[str, Path] = {}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._forwards: list[subprocess.Popen[bytes]] = []
        self._log_files: list[IO[bytes]] = []
        self._lock: IO[str] | None = None
        self.started = False
        self.timings: dict[str, float] = {}

    def __enter__(self) -> RealNode:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -------------------------------------------------------------- lifecycle
    def start(self) -> RealNode:
        """Lock, clean what a killed run left, then containerd, images, kubelet; wait Ready."""
        missing = missing_prerequisites()
        if missing:
            raise RuntimeError(f"the real node needs: {', '.join(missing)}")
        t0 = time.monotonic()
        LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
        lock = LOCK_FILE.open("w")
        deadline = time.monotonic() + LOCK_WAIT
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    lock.close()
                    raise RuntimeError(
                        f"another real node ran on this machine for {LOCK_WAIT:.0f}s "
                        f"({LOCK_FILE} stayed locked)"
                    ) from None
                log(f"waiting for the other real node on this machine to stop ({LOCK_FILE})")
                time.sleep(10)
        self._lock = lock
        self.started = True
        atexit.register(self.stop)
        _install_signal_handlers(self)
        try:
            leftovers = cleanup(quiet=True)
            if leftovers:
                raise RuntimeError(f"cannot clean what an earlier node left: {leftovers}")
            self._record_host_state()
            self.workdir.mkdir(parents=True, exist_ok=True)
            self._start_containerd()
            self._import_images()
            self._make_bridge()
            self._start_kubelet()
        except BaseException:
            self.stop()
            raise
        self.timings["start"] = round(time.monotonic() - t0, 1)
        log(f"node {NODE_NAME} Ready in {self.timings['start']}s ({self.timings})")
        return self

    def stop(self) -> None:
        """Stop everything and put the host back; idempotent."""
        if not self.started:
            return
        self.started = False
        for p in self._forwards:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)
        self._forwards.clear()
        # the kubelet first (it would restart containers), then the shims, then containerd
        for name in ("kubelet", "containerd"):
            p = self._procs.pop(name, None)
            if p and p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=10)
        with contextlib.suppress(Exception):
            self.kube.delete(f"/api/v1/nodes/{NODE_NAME}")
        problems = cleanup()
        for f in self._log_files:
            with contextlib.suppress(OSError):
                f.close()
        self._log_files.clear()
        if self._lock is not None:
            self._lock.close()  # releases the flock
            self._lock = None
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        if problems:
            log(f"WARNING: clean-up left {problems}")

    # -------------------------------------------------------------- parts
    def _record_host_state(self) -> None:
        created = {str(p): not p.exists() for p in (*HOST_PATHS, SHIM_DIR)}
        state = {
            "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text().strip(),
            "created": created,
            "shim_sockets_before": [str(s) for s in (SHIM_DIR / "s").glob("*")]
            if SHIM_DIR.exists()
            else [],
            "pid": os.getpid(),
        }
        if TUN.exists():
            state["tun_mode"] = TUN.stat().st_mode & 0o7777
        STATE_FILE.write_text(json.dumps(state))
        if TUN.exists():
            TUN.chmod(0o666)

    def _spawn(
        self, name: str, argv: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        path = self.workdir / f"{name}.log"
        f = path.open("ab")
        self._log_files.append(f)
        f.write(("$ " + " ".join(argv) + "\n").encode())
        f.flush()
        p = subprocess.Popen(
            argv,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
            env=env,
        )
        self.logs[name] = path
        self._procs[name] = p
        return p

    def log_tail(self, name: str, lines: int = 40) -> str:
        """The last lines of a part's log (for failure messages)."""
        path = self.logs.get(name)
        if not path or not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def _wait(self, name: str, predicate: Any, timeout: float, what: str) -> None:
        def check() -> Any:
            p = self._procs.get(name)
            if p is not None and p.poll() is not None:
                raise RuntimeError(f"{name} exited ({p.returncode}):\n{self.log_tail(name)}")
            return predicate()

        try:
            wait_for(check, timeout=timeout, interval=0.2, what=what)
        except TimeoutError as e:
            raise RuntimeError(f"{e}\n{name} log:\n{self.log_tail(name)}") from None

    def _start_containerd(self) -> None:
        t0 = time.monotonic()
        for d in (STATE_DIR / "cni", ROOT_DIR):
            d.mkdir(parents=True, exist_ok=True)
        (STATE_DIR / "cni" / "10-gro-realnode.conflist").write_text(json.dumps(_cni_conflist()))
        TUN_SPEC.write_text(_tun_base_spec())
        config = STATE_DIR / "containerd.toml"
        config.write_text(_containerd_config(self.pause_image))
        containerd = build.binary("containerd")
        # the shim (containerd-shim-runc-v2) is found on PATH, beside containerd
        self._spawn(
            "containerd",
            [str(containerd), "--config", str(config), "--log-level", "warn"],
            env={**os.environ, "PATH": f"{containerd.parent}:{os.environ.get('PATH', '')}"},
        )
        sock = STATE_DIR / "containerd.sock"
        self._wait(
            "containerd",
            lambda: sock.exists() and self.ctr("version", check=False).returncode == 0,
            30,
            "containerd socket",
        )
        self.timings["containerd"] = round(time.monotonic() - t0, 1)

    def ctr(
        self, *args: str, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """``ctr`` against this node's containerd, namespace k8s.io (the CRI's)."""
        ctr = str(build.binary("ctr"))
        return _run(
            ctr, "--address", str(STATE_DIR / "containerd.sock"), "-n", "k8s.io", *args,
            check=check, timeout=timeout,
        )  # fmt: skip

    def _import_images(self) -> None:
        for name, tarball in self.images.items():
            t0 = time.monotonic()
            # The kubelet normalises local/x:1 to docker.io/local/x:1: import under that name,
            # or the Pod fails with ErrImageNeverPull.
            self.ctr(
                "images", "import", "--base-name", f"docker.io/{name.split(':')[0]}", str(tarball)
            )
            self.timings[f"import {name}"] = round(time.monotonic() - t0, 1)

    def _make_bridge(self) -> None:
        """The CNI bridge up front, with the gateway address: the kubelet serves on it and
        Pods reach forwarded host services there. The bridge plugin adopts it.

        Its MAC address is pinned: a Linux bridge without one takes the lowest MAC of its
        ports, so each Pod's veth coming or going could change the gateway's MAC under the
        other Pods, whose ARP entries then pointed at a port that was gone. Their traffic to
        the gateway (the runner's calls to Gitea) stalled for up to a minute, until the entry
        was re-validated: long enough for Gitea's 30 s zombie-task timeout to fail a running
        job (the DinD and rootless flakes, issue 13)."""
        _run("ip", "link", "add", BRIDGE, "address", BRIDGE_MAC, "type", "bridge", check=True)
        _run("ip", "addr", "add", f"{GATEWAY}/16", "dev", BRIDGE, check=True)
        _run("ip", "link", "set", BRIDGE, "up", check=True)

    def _start_kubelet(self) -> None:
        t0 = time.monotonic()
        from .sandbox import free_port

        kdir = ROOT_DIR / "kubelet"
        kdir.mkdir(parents=True, exist_ok=True)
        config = STATE_DIR / "kubelet-config.json"
        config.write_text(_kubelet_config(free_port(), free_port()))
        kubelet = str(build.binary("kubelet"))
        taint = f"{NODE_TAINT['key']}={NODE_TAINT['value']}:{NODE_TAINT['effect']}"
        self._spawn(
            "kubelet",
            [
                kubelet,
                "--config", str(config),
                "--kubeconfig", str(self.kubeconfig),
                "--root-dir", str(kdir),
                "--cert-dir", str(STATE_DIR / "kubelet-pki"),
                "--hostname-override", NODE_NAME,
                "--node-ip", GATEWAY,
                "--node-labels", f"{NODE_LABEL}=true",
                "--register-with-taints", taint,
                "--v", "1",
            ],
        )  # fmt: skip
        self._wait("kubelet", self.ready, 90, f"node {NODE_NAME} Ready")
        self.timings["kubelet"] = round(time.monotonic() - t0, 1)

    def ready(self) -> bool:
        """Whether the node's Ready condition is True."""
        with contextlib.suppress(Exception):
            node = self.kube.get(f"/api/v1/nodes/{NODE_NAME}")
            return any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in node.get("status", {}).get("conditions", [])
            )
        return False

    def expose(self, port: int, tls_pem: Path | None = None, listen_port: int | None = None) -> str:
        """Forward ``127.0.0.1:port`` to the node's bridge address (socat), so Pods on the
        node reach a loopback-only host service; returns the ``host:port`` Pods use.

        ``tls_pem`` (certificate and key in one file): serve TLS there instead, as an
        HTTPS front of a private CA would; ``listen_port`` then tells it apart.
        """
        listen_port = listen_port or port
        if tls_pem is None:
            listen = f"TCP-LISTEN:{listen_port},bind={GATEWAY},fork,reuseaddr"
        else:
            listen = (
                f"OPENSSL-LISTEN:{listen_port},bind={GATEWAY},fork,reuseaddr,"
                f"cert={tls_pem},verify=0"
            )
        p = subprocess.Popen(
            ["socat", listen, f"TCP:127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self._forwards.append(p)

        def listening() -> bool:
            if p.poll() is not None:
                raise RuntimeError(f"socat {listen} exited ({p.returncode})")
            with socket.socket() as s:
                s.settimeout(1)
                return s.connect_ex((GATEWAY, listen_port)) == 0

        wait_for(listening, timeout=10, interval=0.1, what=f"forward {GATEWAY}:{listen_port}")
        return f"{GATEWAY}:{listen_port}"


def _die_with_parent() -> None:
    """SIGKILL this child when the process that started it dies (Linux prctl)."""
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


_NODES: list[RealNode] = []


def _install_signal_handlers(node: RealNode) -> None:
    """SIGTERM/SIGINT/SIGHUP: clean up the node, then die of the signal as before."""
    _NODES.append(node)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        previous = signal.getsignal(sig)
        if getattr(previous, "_gro_realnode", False):
            continue

        def handler(signum: int, frame: Any, previous: Any = previous) -> None:
            for n in list(_NODES):
                with contextlib.suppress(Exception):
                    n.stop()
            if callable(previous):
                previous(signum, frame)
            else:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

        handler._gro_realnode = True  # type: ignore[attr-defined]
        with contextlib.suppress(ValueError):  # not in the main thread
            signal.signal(sig, handler)
