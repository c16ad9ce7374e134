"""Container images for the real node, built locally from Debian packages and the testbed's
own binaries: no registry is reachable here, and none is needed.

Why each image, and what it stands for:

* ``local/pause`` - containerd's sandbox image: Kubernetes' own ``build/pause/linux/pause.c``
  (from the module cache) compiled statically, user 65535.
* ``local/busybox`` - small job image for ``container:`` jobs and the test's sidecars:
  Debian's busybox-static, ``/etc/passwd`` with a user 1000.
* ``local/gro-testbed-runner`` - the layout of the official basic runner image: tini, bash,
  git, tzdata, the session's runner binary as ``/usr/local/bin/gitea-runner`` (the testbed's
  own unless ``GRO_TESTBED_RUNNER_BIN`` names another), and an entrypoint written here from
  the official image's documented behaviour (:data:`RUNNER_ENTRYPOINT`), ``/data`` as working
  directory. Debian instead of Alpine.
* ``local/docker`` (tag ``dind``) - equivalent of ``docker:dind`` for the operator's DinD
  sidecar: Debian's ``docker.io`` and an entrypoint that, like the official one, writes CA,
  server and client certificates into ``$DOCKER_TLS_CERTDIR`` and serves TLS on 2376 (plus
  the local unix socket). It cannot pull either, so it loads ``/images/*.tar`` (busybox, a
  busybox with a Docker CLI) into its store before serving: job images are "present".

Each image is an OCI layout tarball built with umoci (root filesystems from mmdebstrap with
the machine's own apt sources, or written here), cached under the testbed cache keyed by a
hash of every input, and imported by :class:`tests.testbed.realnode.RealNode`.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import json
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from . import build, runners

PAUSE = "local/pause:3.10"
BUSYBOX = "local/busybox:1.35"
BUSYBOX_DOCKER = "local/busybox-docker:1.35"
# A service container for jobs (``services:``): busybox's httpd serving /www on port 8080.
BUSYBOX_WEB = "local/busybox-web:1.35"
RUNNER = "local/gro-testbed-runner:0.2"
DIND = "local/docker:dind"
ROOTLESS = "local/gro-testbed-runner:0.2-dind-rootless"
# dind-userns's daemon sidecar (docker:dind-rootless's part the operator uses: dockerd,
# rootlesskit, slirp4netns, newuidmap), with the job images preloaded.
USERNS_DAEMON = "local/docker:dind-rootless"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RUNNER_PACKAGES = ("bash", "git", "ca-certificates", "tini", "tzdata")
DIND_PACKAGES = ("docker.io", "iptables", "openssl", "ca-certificates", "procps")
ROOTLESS_PACKAGES = (
    *RUNNER_PACKAGES,
    *DIND_PACKAGES,
    "rootlesskit",
    "slirp4netns",
    "uidmap",
    "passwd",
    "iproute2",
    "mount",
)


# One Debian root file system for both Docker daemon images (the DinD sidecar and the
# dind-userns sidecar): mmdebstrap is most of an image's cold build, so it runs once.
DOCKER_BASE_PACKAGES = (*DIND_PACKAGES, "rootlesskit", "slirp4netns", "uidmap", "iproute2")
# legacy iptables: the nested daemon's rules go into its own network namespace
DOCKER_BASE_HOOKS = (
    'chroot "$1" update-alternatives --set iptables /usr/sbin/iptables-legacy',
    'chroot "$1" update-alternatives --set ip6tables /usr/sbin/ip6tables-legacy',
)


def log(msg: str) -> None:
    import sys

    print(f"[images {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def images_dir() -> Path:
    """Where built images live (beside the testbed binaries, outside the repository)."""
    return build.cache_root() / "images"


def _run(*argv: str, cwd: Path | None = None, stdin: bytes | None = None) -> str:
    out = subprocess.run(argv, cwd=cwd, input=stdin, capture_output=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv[:4])} failed ({out.returncode}): {out.stderr.decode()[-2000:]}"
        )
    return out.stdout.decode()


# ------------------------------------------------------------------ root filesystems


def _add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755, uid: int = 0) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime, info.uid, info.gid = tarfile.DIRTYPE, mode, 0, uid, uid
    tar.addfile(info)


def _add_link(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mtime, info.mode = tarfile.SYMTYPE, target, 0, 0o777
    tar.addfile(info)


PASSWD = b"root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n"
GROUP = b"root:x:0:\nuser:x:1000:\n"


def busybox_rootfs(out: Path, extra: dict[str, Path] | None = None) -> None:
    """busybox-static with every applet linked, a user 1000, /tmp; ``extra`` adds host files
    (image path -> host path)."""
    applets = _run("/bin/busybox", "--list-full").split()
    with tarfile.open(out, "w") as tar:
        for d in ("bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "root", "home"):
            _add_dir(tar, d)
        _add_dir(tar, "home/user", uid=1000)
        _add_dir(tar, "tmp", 0o1777)
        _add_file(tar, "bin/busybox", Path("/bin/busybox").read_bytes(), 0o755)
        for applet in applets:
            if applet != "bin/busybox":
                _add_link(tar, applet, "/bin/busybox")
        _add_file(tar, "etc/passwd", PASSWD)
        _add_file(tar, "etc/group", GROUP)
        for name, src in (extra or {}).items():
            for parent in reversed(Path(name).parents[:-1]):
                if str(parent) not in tar.getnames():
                    _add_dir(tar, str(parent))
            _add_file(tar, name, src.read_bytes(), src.stat().st_mode & 0o777)


def apt_sources() -> list[str]:
    """The machine's own apt source files (never a mirror name written here)."""
    files = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    return [
        str(f)
        for f in files
        if f.is_file() and f.suffix in (".list", ".sources") and f.read_text().strip()
    ]


def debian_suite() -> str:
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip('"')
    raise RuntimeError("no VERSION_CODENAME in /etc/os-release")


def mmdebstrap(out: Path, packages: tuple[str, ...], hooks: tuple[str, ...] = ()) -> None:
    """A Debian root filesystem tarball: essential packages plus ``packages``."""
    sources = apt_sources()
    if not sources:
        raise RuntimeError("no apt sources configured on this machine (/etc/apt/sources.list*)")
    argv = [
        "mmdebstrap",
        "--variant=essential",
        "--mode=root",
        "--quiet",
        f"--include={','.join(packages)}",
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        *(f"--customize-hook={h}" for h in hooks),
        debian_suite(),
        str(out),
        *sources,
    ]
    _run(*argv)


# ------------------------------------------------------------------ image formats


def oci_image(out: Path, ref: str, layers: list[Path], config: dict[str, list[str] | str]) -> None:
    """An OCI layout tarball of ``layers`` with the given umoci ``--config.*`` settings."""
    tag = ref.split(":", 1)[1]
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        layout = Path(tmp) / "oci"
        _run("umoci", "init", "--layout", str(layout))
        image = f"{layout}:{tag}"
        _run("umoci", "new", "--image", image)
        for layer in layers:
            _run("umoci", "raw", "add-layer", "--image", image, str(layer))
        args: list[str] = []
        for key, value in config.items():
            for v in [value] if isinstance(value, str) else value:
                args += [f"--config.{key}", v]
        _run("umoci", "config", "--image", image, "--os", "linux", "--architecture", "amd64", *args)
        _run("umoci", "gc", "--layout", str(layout))
        _run("tar", "-C", str(layout), "-cf", str(out), ".")


def docker_archive(out: Path, ref: str, layer: Path, cmd: list[str]) -> None:
    """A ``docker save`` style tarball of one layer, for ``docker load`` inside DinD (Docker
    20.10 loads no OCI layouts)."""
    digest = hashlib.sha256(layer.read_bytes()).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": [PATH_ENV], "Cmd": cmd},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{digest}"]},
        }
    ).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [ref], "Layers": [f"{digest}/layer.tar"]}]
    with tarfile.open(out, "w") as tar:
        _add_file(tar, config_name, config)
        _add_dir(tar, digest)
        tar.add(layer, f"{digest}/layer.tar")
        _add_file(tar, "manifest.json", json.dumps(manifest).encode())


# ------------------------------------------------------------------ recipes

# With DOCKER_TLS_CERTDIR set, write a CA, a server and a client certificate there, as
# docker:dind's entrypoint does (shared by both Docker images below).
CERTS_SH = r"""certs="${DOCKER_TLS_CERTDIR:-}"
tls=""
if [ -n "$certs" ]; then
  mkdir -p "$certs/ca" "$certs/server" "$certs/client"
  cd "$certs"
  if [ ! -s ca/cert.pem ]; then
    openssl genrsa -out ca/key.pem 2048 2>/dev/null
    openssl req -new -x509 -days 825 -key ca/key.pem -out ca/cert.pem -subj "/CN=docker:dind CA"
  fi
  if [ ! -s server/cert.pem ]; then
    openssl genrsa -out server/key.pem 2048 2>/dev/null
    openssl req -new -key server/key.pem -out server/csr.pem -subj "/CN=docker:dind server"
    printf 'subjectAltName=DNS:docker,DNS:localhost,IP:127.0.0.1,DNS:%s\n' "$(hostname)" \
      > server/openssl.cnf
    printf 'extendedKeyUsage=serverAuth\n' >> server/openssl.cnf
    openssl x509 -req -in server/csr.pem -CA ca/cert.pem -CAkey ca/key.pem -CAcreateserial \
      -out server/cert.pem -days 825 -extfile server/openssl.cnf 2>/dev/null
    cp ca/cert.pem server/ca.pem
  fi
  if [ ! -s client/cert.pem ]; then
    openssl genrsa -out client/key.pem 2048 2>/dev/null
    openssl req -new -key client/key.pem -out client/csr.pem -subj "/CN=docker:dind client"
    printf 'extendedKeyUsage=clientAuth\n' > client/openssl.cnf
    openssl x509 -req -in client/csr.pem -CA ca/cert.pem -CAkey ca/key.pem -CAcreateserial \
      -out client/cert.pem -days 825 -extfile client/openssl.cnf 2>/dev/null
    cp ca/cert.pem client/ca.pem
    chmod 0644 client/key.pem
  fi
  cd /
"""

DIND_ENTRYPOINT = (
    r"""#!/bin/sh
# docker:dind's behaviour on Debian's docker.io: with DOCKER_TLS_CERTDIR set, write a CA,
# a server and a client certificate there and serve TLS on 2376 beside the unix socket.
set -eu
"""
    + CERTS_SH
    + r"""  tls="--host=tcp://0.0.0.0:2376 --tlsverify --tlscacert $certs/server/ca.pem
       --tlscert $certs/server/cert.pem --tlskey $certs/server/key.pem"
fi
# No registry: load the job images shipped in /images first, on a private socket, so they
# are present before the daemon answers on the sockets the runner and the probe use.
if ls /images/*.tar >/dev/null 2>&1; then
  dockerd --host=unix:///run/gro-preload.sock --pidfile=/run/gro-preload.pid \
    >/tmp/preload.log 2>&1 &
  i=0
  until docker -H unix:///run/gro-preload.sock info >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -lt 120 ] || { cat /tmp/preload.log; exit 1; }; sleep 0.5
  done
  for t in /images/*.tar; do docker -H unix:///run/gro-preload.sock load -i "$t"; done
  kill "$(cat /run/gro-preload.pid)"; wait
fi
# shellcheck disable=SC2086
exec dockerd --host=unix:///var/run/docker.sock $tls "$@"
"""
)


ROOTLESS_ENTRYPOINT = (
    r"""#!/bin/sh
# The official runner dind-rootless image's behaviour (docker:dind-rootless + the runner,
# under s6 there) on Debian: a rootless dockerd (rootlesskit, slirp4netns) serving TLS on
# 2376, published into the Pod's network namespace, then the runner's entrypoint.
set -eu
"""
    + CERTS_SH
    + r"""  tls="--host=tcp://0.0.0.0:2376 --tlsverify --tlscacert $certs/server/ca.pem
       --tlscert $certs/server/cert.pem --tlskey $certs/server/key.pem"
fi
export XDG_RUNTIME_DIR="/run/user/$(id -u)"
mkdir -p "$XDG_RUNTIME_DIR"
export DOCKERD_ROOTLESS_ROOTLESSKIT_FLAGS="-p 0.0.0.0:2376:2376/tcp"
sock="unix://$XDG_RUNTIME_DIR/docker.sock"
# the operator's DOCKER_TLS_VERIFY is for tcp://localhost:2376, not for the local socket
docker() { env -u DOCKER_TLS_VERIFY -u DOCKER_HOST -u DOCKER_CERT_PATH docker "$@"; }
# shellcheck disable=SC2086
dockerd-rootless.sh --host="$sock" $tls >/tmp/dockerd.log 2>&1 &
i=0
until docker -H "$sock" version >/dev/null 2>&1; do
  i=$((i + 1)); [ $i -lt 240 ] || { cat /tmp/dockerd.log; exit 1; }; sleep 0.5
done
for t in /images/*.tar; do docker -H "$sock" load -i "$t"; done
cd /data  # the image's working directory (the certificate step above left it)
exec runner-entrypoint.sh
"""
)


# The runner images' entrypoint, written from the official image's documented behaviour
# (docs/development.md, "What the official runner does"): the same environment variables,
# registration only while the state file is missing or empty, success judged by the register
# command's own line, 5 s between attempts, the token dropped before the daemon starts.
RUNNER_ENTRYPOINT = r"""#!/bin/bash
set -u
state=${RUNNER_STATE_FILE:-.runner}
config=()
if [ -n "${CONFIG_FILE:-}" ]; then config=(--config "$CONFIG_FILE"); fi
if [ ! -s "$state" ]; then
  token=${GITEA_RUNNER_REGISTRATION_TOKEN:-}
  if [ -z "$token" ] && [ -n "${GITEA_RUNNER_REGISTRATION_TOKEN_FILE:-}" ]; then
    token=$(cat "$GITEA_RUNNER_REGISTRATION_TOKEN_FILE")
  fi
  extra=()
  if [ -n "${GITEA_RUNNER_EPHEMERAL:-}" ]; then extra+=(--ephemeral); fi
  if [ -n "${GITEA_RUNNER_LABELS:-}" ]; then extra+=(--labels "$GITEA_RUNNER_LABELS"); fi
  name=${GITEA_RUNNER_NAME:-$(cat /proc/sys/kernel/hostname)}
  attempts=${GITEA_MAX_REG_ATTEMPTS:-10}
  n=0
  while :; do
    out=$(gitea-runner register --no-interactive --instance "${GITEA_INSTANCE_URL:-}" \
      --token "$token" --name "$name" "${config[@]}" "${extra[@]}" 2>&1)
    printf '%s
' "$out"
    case $out in *"Runner registered successfully"*) break ;; esac
    n=$((n + 1))
    if [ "$n" -ge "$attempts" ]; then
      echo "registration failed after $n attempts" >&2
      exit 1
    fi
    sleep 5
  done
  unset token
fi
unset GITEA_RUNNER_REGISTRATION_TOKEN GITEA_RUNNER_REGISTRATION_TOKEN_FILE
once=()
if [ -n "${GITEA_RUNNER_ONCE:-}" ]; then once=(--once); fi
exec gitea-runner daemon "${config[@]}" "${once[@]}"
"""


def _runner_binary() -> Path:
    """The session's runner (built first when needed): what every runner image carries."""
    return runners.resolve().path


def _pause_source() -> Path:
    moddir = _run(
        "go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes",
        cwd=build.COMPONENTS["kubelet"].wrapper,
    ).strip()  # fmt: skip
    return Path(moddir) / "build/pause/linux/pause.c"


def build_pause(work: Path, out: Path) -> None:
    binary = work / "pause"
    _run("gcc", "-Os", "-static", "-o", str(binary), str(_pause_source()))
    _run("strip", str(binary))
    layer = work / "layer.tar"
    with tarfile.open(layer, "w") as tar:
        _add_file(tar, "pause", binary.read_bytes(), 0o755)
    oci_image(out, PAUSE, [layer], {"entrypoint": "/pause", "user": "65535:65535"})


def build_busybox(work: Path, out: Path) -> None:
    layer = work / "layer.tar"
    busybox_rootfs(layer)
    oci_image(out, BUSYBOX, [layer], {"cmd": "sh", "env": PATH_ENV})


def build_runner(work: Path, out: Path) -> None:
    base = work / "debian.tar"
    # /sbin/tini as in the official image (Debian ships /usr/bin/tini)
    mmdebstrap(base, RUNNER_PACKAGES, ('ln -sf /usr/bin/tini "$1/usr/sbin/tini"',))
    top = work / "runner.tar"
    with tarfile.open(top, "w") as tar:
        _add_file(tar, "usr/local/bin/gitea-runner", _runner_binary().read_bytes(), 0o755)
        _add_file(tar, "usr/local/bin/runner-entrypoint.sh", RUNNER_ENTRYPOINT.encode(), 0o755)
        _add_dir(tar, "data", 0o777)
    oci_image(
        out,
        RUNNER,
        [base, top],
        {
            "entrypoint": ["/sbin/tini", "--", "runner-entrypoint.sh"],
            "env": PATH_ENV,
            "volume": "/data",
            "workingdir": "/data",
        },
    )


def docker_base() -> Path:
    """The Debian root file system of the Docker daemon images, built once and cached by its
    packages, hooks and suite (under the cache's lock, like an image)."""
    h = hashlib.sha256(
        repr((DOCKER_BASE_PACKAGES, DOCKER_BASE_HOOKS, debian_suite())).encode()
        + inspect.getsource(mmdebstrap).encode()
    )
    out = images_dir() / f".base-docker-{h.hexdigest()[:12]}.tar"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with build.cache_lock(out.stem), tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        if not out.is_file():
            partial = Path(tmp) / "base.tar"
            mmdebstrap(partial, DOCKER_BASE_PACKAGES, DOCKER_BASE_HOOKS)
            partial.rename(out)
    for old in out.parent.glob(".base-docker-*.tar"):
        if old != out:
            old.unlink()
    return out


def build_dind(work: Path, out: Path) -> None:
    base = docker_base()
    root = work / "root"
    root.mkdir()
    _run("tar", "-C", str(root), "-xf", str(base), "./usr/bin/docker")
    bb = work / "busybox.tar"
    busybox_rootfs(bb)
    # busybox plus a Docker CLI: a job image whose steps run `docker build`
    libs = _shared_libs(root / "usr/bin/docker")
    bbd = work / "busybox-docker.tar"
    docker_files = {lib.lstrip("/"): Path(lib) for lib in libs}
    busybox_rootfs(bbd, {"usr/bin/docker": root / "usr/bin/docker", **docker_files})
    top = work / "top.tar"
    with tarfile.open(top, "w") as tar:
        _add_file(tar, "usr/local/bin/dockerd-entrypoint.sh", DIND_ENTRYPOINT.encode(), 0o755)
        _add_dir(tar, "images")
        for name, ref, layer in (("busybox", BUSYBOX, bb), ("busybox-docker", BUSYBOX_DOCKER, bbd)):
            archive = work / f"{name}.docker.tar"
            docker_archive(archive, ref, layer, ["sh"])
            tar.add(archive, f"images/{name}.tar")
        _add_dir(tar, "certs")
    oci_image(
        out,
        DIND,
        [base, top],
        {
            "entrypoint": "/usr/local/bin/dockerd-entrypoint.sh",
            "env": [PATH_ENV, "DOCKER_TLS_CERTDIR=/certs"],
            "volume": "/var/lib/docker",
        },
    )


# No registry: the operator's daemon script execs `dockerd` from PATH; this one loads the job
# images into the daemon's storage first (on a private socket, so nothing sees the daemon
# before they are there), then execs the real dockerd with the operator's arguments.
USERNS_DOCKERD_WRAPPER = r"""#!/bin/sh
set -eu
if ls /images/*.tar >/dev/null 2>&1; then
  /usr/sbin/dockerd --data-root=/var/lib/docker --host=unix:///run/gro-preload.sock \
    --pidfile=/run/gro-preload.pid >/tmp/preload.log 2>&1 &
  i=0
  until docker -H unix:///run/gro-preload.sock info >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -lt 120 ] || { cat /tmp/preload.log >&2; exit 1; }; sleep 0.5
  done
  for t in /images/*.tar; do docker -H unix:///run/gro-preload.sock load -i "$t" >&2; done
  kill "$(cat /run/gro-preload.pid)"; wait
fi
exec /usr/sbin/dockerd "$@"
"""


def build_userns_daemon(work: Path, out: Path) -> None:
    """The Docker daemon sidecar of mode ``dind-userns``: Debian's Docker with rootlesskit,
    slirp4netns and newuidmap, and the job images (the operator supplies the command)."""
    base = docker_base()
    archives = _job_image_archives(work, base)
    page = work / "index.html"
    page.write_text("served by a job's service container\n")
    web = work / "busybox-web.tar"
    busybox_rootfs(web, {"www/index.html": page})
    archives["busybox-web"] = work / "busybox-web.docker.tar"
    docker_archive(
        archives["busybox-web"], BUSYBOX_WEB, web, ["httpd", "-f", "-p", "8080", "-h", "/www"]
    )
    top = work / "top.tar"
    with tarfile.open(top, "w") as tar:
        _add_file(tar, "usr/local/bin/dockerd", USERNS_DOCKERD_WRAPPER.encode(), 0o755)
        _add_dir(tar, "images")
        for name, archive in archives.items():
            tar.add(archive, f"images/{name}.tar")
    oci_image(out, USERNS_DAEMON, [base, top], {"env": [PATH_ENV], "cmd": ["dockerd"]})


def build_rootless(work: Path, out: Path) -> None:
    """The runner with its own rootless Docker daemon (mode ``dind-rootless``)."""
    base = work / "debian.tar"
    mmdebstrap(
        base,
        ROOTLESS_PACKAGES,
        (
            'ln -sf /usr/bin/tini "$1/usr/sbin/tini"',
            'chroot "$1" update-alternatives --set iptables /usr/sbin/iptables-legacy',
            'chroot "$1" useradd --uid 1000 --create-home --shell /bin/bash rootless',
            'echo rootless:100000:65536 > "$1/etc/subuid"',
            'echo rootless:100000:65536 > "$1/etc/subgid"',
            'install -m 0755 "$1/usr/share/docker.io/contrib/dockerd-rootless.sh"'
            ' "$1/usr/local/bin/dockerd-rootless.sh"',
        ),
    )
    archives = _job_image_archives(work, base)
    top = work / "top.tar"
    with tarfile.open(top, "w") as tar:
        _add_file(tar, "usr/local/bin/gitea-runner", _runner_binary().read_bytes(), 0o755)
        _add_file(tar, "usr/local/bin/runner-entrypoint.sh", RUNNER_ENTRYPOINT.encode(), 0o755)
        _add_file(tar, "usr/local/bin/rootless-entrypoint.sh", ROOTLESS_ENTRYPOINT.encode(), 0o755)
        _add_dir(tar, "data", 0o777)
        _add_dir(tar, "certs", 0o777)
        _add_dir(tar, "run/user", 0o1777)
        _add_dir(tar, "images")
        for name, archive in archives.items():
            tar.add(archive, f"images/{name}.tar")
    oci_image(
        out,
        ROOTLESS,
        [base, top],
        {
            "entrypoint": ["/sbin/tini", "--", "/usr/local/bin/rootless-entrypoint.sh"],
            "env": [PATH_ENV, "DOCKER_TLS_CERTDIR=/certs"],
            "user": "1000:1000",
            "volume": "/data",
            "workingdir": "/data",
        },
    )


def _job_image_archives(work: Path, base: Path) -> dict[str, Path]:
    """``docker load`` tarballs of the job images: busybox, and busybox with the Docker CLI
    of the root filesystem ``base`` (a job image whose steps run ``docker build``)."""
    root = work / "root"
    root.mkdir()
    _run("tar", "-C", str(root), "-xf", str(base), "./usr/bin/docker")
    layers = {"busybox": work / "busybox.tar", "busybox-docker": work / "busybox-docker.tar"}
    busybox_rootfs(layers["busybox"])
    docker_files = {lib.lstrip("/"): Path(lib) for lib in _shared_libs(root / "usr/bin/docker")}
    busybox_rootfs(
        layers["busybox-docker"], {"usr/bin/docker": root / "usr/bin/docker", **docker_files}
    )
    archives = {}
    for name, ref in (("busybox", BUSYBOX), ("busybox-docker", BUSYBOX_DOCKER)):
        archives[name] = work / f"{name}.docker.tar"
        docker_archive(archives[name], ref, layers[name], ["sh"])
    return archives


def _shared_libs(binary: Path) -> list[str]:
    """The host's copies of what a dynamically linked binary loads (same Debian release)."""
    libs = []
    for line in _run("ldd", str(binary)).splitlines():
        parts = line.split()
        path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0]
        if path.startswith("/"):
            libs.append(path)
    return libs


RECIPES: dict[str, tuple[Callable[[Path, Path], None], Callable[[], bytes]]] = {
    PAUSE: (build_pause, lambda: _pause_source().read_bytes()),
    BUSYBOX: (build_busybox, lambda: Path("/bin/busybox").read_bytes()),
    RUNNER: (
        build_runner,
        lambda: (
            _runner_binary().read_bytes() + RUNNER_ENTRYPOINT.encode() + debian_suite().encode()
        ),
    ),
    DIND: (build_dind, lambda: Path("/bin/busybox").read_bytes() + debian_suite().encode()),
    USERNS_DAEMON: (
        build_userns_daemon,
        lambda: Path("/bin/busybox").read_bytes() + debian_suite().encode(),
    ),
    ROOTLESS: (
        build_rootless,
        lambda: (
            _runner_binary().read_bytes()
            + RUNNER_ENTRYPOINT.encode()
            + Path("/bin/busybox").read_bytes()
            + debian_suite().encode()
        ),
    ),
}


# Code every image's bytes depend on (besides its own recipe and inputs).
_SHARED = (busybox_rootfs, mmdebstrap, oci_image, docker_archive, _shared_libs)


def image_path(ref: str) -> Path:
    """The cached tarball of an image (built or not), keyed by every input: the recipe's
    code and constants, the files it packs, the Debian suite."""
    builder, inputs = RECIPES[ref]
    h = hashlib.sha256()
    for part in (builder, *_SHARED):
        h.update(inspect.getsource(part).encode())
    h.update(repr((ref, PATH_ENV, RUNNER_PACKAGES, DIND_PACKAGES, DIND_ENTRYPOINT)).encode())
    if ref == ROOTLESS:
        h.update(repr((ROOTLESS_PACKAGES, ROOTLESS_ENTRYPOINT)).encode())
        h.update(inspect.getsource(_job_image_archives).encode())
    if ref in (DIND, USERNS_DAEMON):
        h.update(repr((DOCKER_BASE_PACKAGES, DOCKER_BASE_HOOKS)).encode())
        h.update(inspect.getsource(docker_base).encode())
    if ref == USERNS_DAEMON:
        h.update(USERNS_DOCKERD_WRAPPER.encode())
        h.update(inspect.getsource(_job_image_archives).encode())
    h.update(inputs())
    slug = ref.replace("/", "_").replace(":", "_")
    return images_dir() / f"{slug}-{h.hexdigest()[:12]}.tar"


def ensure_image(ref: str) -> Path:
    """Build the image unless cached; return its OCI layout tarball."""
    out = image_path(ref)
    if out.is_file():
        log(f"{ref}: cached ({out.name})")
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with (
        build.cache_lock(out.stem),
        tempfile.TemporaryDirectory(dir=out.parent, prefix=".build-") as tmp,
    ):
        if out.is_file():  # another process built it while this one waited for the lock
            return out
        partial = Path(tmp) / "image.tar"
        RECIPES[ref][0](Path(tmp), partial)
        partial.rename(out)
    for old in out.parent.glob(out.name.rsplit("-", 1)[0] + "-*.tar"):
        if old != out:
            old.unlink()
    log(f"{ref}: built in {time.monotonic() - t0:.0f}s ({out.stat().st_size // 2**20} MiB)")
    return out


def ensure_images(refs: list[str] | None = None) -> dict[str, Path]:
    """Build (or find) every image the real node needs: ref -> tarball."""
    t0 = time.monotonic()
    out = {ref: ensure_image(ref) for ref in (refs or list(RECIPES))}
    log(f"images ready in {time.monotonic() - t0:.0f}s")
    return out
