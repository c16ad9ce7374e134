"""Build the real peers (etcd, Kubernetes control plane, kwok, Gitea, runner) from Go modules.

Why: the project's machines have Go and the Go module proxy but no container
engine, so every peer the operator talks to is compiled from its published Go
module by a tiny wrapper module in ``tests/testbed/go/<component>/``.  The
binaries go into a cache *outside* the repository, keyed by component, pinned
version and a hash of the wrapper's go.mod/go.sum, so only the first run pays
the cold compile (tens of minutes on 2 cores) and later runs return at once.

The runner is the testbed's own (``go/runner``): the module proxy refuses the official
runner's module, so the testbed builds a runner written here on the official workflow
engine ``gitea.com/gitea/act`` (see tests/testbed/README.md, "Runner").

Cache root: ``$GRO_TESTBED_CACHE`` or ``${XDG_CACHE_HOME:-~/.cache}/gitea-runner-operator/testbed``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

GO_DIR = Path(__file__).resolve().parent / "go"


@dataclasses.dataclass(frozen=True)
class Component:
    """How to build one wrapper module: which packages become which binaries."""

    name: str
    module: str  # the upstream module whose version pins the build
    binaries: dict[str, str]  # output binary name -> Go package path
    cgo: bool = False
    tags: tuple[str, ...] = ()
    extra_ldflags: tuple[str, ...] = ()
    # Directories copied from the upstream module into the cache's static/ (Gitea reads
    # templates/ and options/ at run time when built without the bindata tag; Flux's CRDs
    # are installed from config/crd/bases).
    copy_dirs: tuple[str, ...] = ()
    # Wrapper module directory under go/ when it is not the component name (e.g. two
    # Gitea releases side by side).
    wrapper_dir: str = ""
    # Go variable set to the pinned version without its "v" (-X), so the binary reports it.
    version_var: str = ""
    # Extra names for a built binary in the same bin directory (alias -> binary): the
    # testbed runner answers to the name the runner images and the operator's scripts use.
    aliases: tuple[tuple[str, str], ...] = ()

    @property
    def wrapper(self) -> Path:
        """The wrapper module's directory."""
        return GO_DIR / (self.wrapper_dir or self.name)


def _kube_ldflags(version: str) -> tuple[str, ...]:
    """-X flags that make ``--version`` of the control-plane binaries real."""
    m = re.fullmatch(r"v(\d+)\.(\d+)\.\d+", version)
    major, minor = (m.group(1), m.group(2)) if m else ("1", "0")
    flags: list[str] = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return tuple(flags)


COMPONENTS: dict[str, Component] = {
    "etcd": Component(
        name="etcd",
        module="go.etcd.io/etcd/server/v3",
        binaries={"etcd": "go.etcd.io/etcd/server/v3"},
    ),
    "kubernetes": Component(
        name="kubernetes",
        module="k8s.io/kubernetes",
        binaries={
            "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
            "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
            "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
        },
        tags=("selinux", "notest"),
    ),
    # The real node's kubelet: same wrapper module (go/kubernetes), same version flags,
    # its own cache entry so the control plane alone does not pay its ~6 min compile.
    "kubelet": Component(
        name="kubelet",
        module="k8s.io/kubernetes",
        binaries={"kubelet": "k8s.io/kubernetes/cmd/kubelet"},
        tags=("selinux", "notest"),
        wrapper_dir="kubernetes",
    ),
    # The real node's container runtime: containerd 2.x and runc >= 1.2, what a Pod with its
    # own user namespace (hostUsers: false) needs; Debian's containerd 1.6 and runc 1.1 are
    # too old. containerd without cgo (no btrfs snapshotter: the node uses overlayfs).
    "containerd": Component(
        name="containerd",
        module="github.com/containerd/containerd/v2",
        binaries={
            name: f"github.com/containerd/containerd/v2/cmd/{name}"
            for name in ("containerd", "containerd-shim-runc-v2", "ctr")
        },
        tags=("no_btrfs", "no_devmapper", "no_zfs"),
        version_var="github.com/containerd/containerd/v2/version.Version",
    ),
    # runc needs cgo and libseccomp (Debian's libseccomp-dev) for its seccomp filters.
    "runc": Component(
        name="runc",
        module="github.com/opencontainers/runc",
        binaries={"runc": "github.com/opencontainers/runc"},
        cgo=True,
        tags=("seccomp",),
        version_var="main.version",
    ),
    "kwok": Component(
        name="kwok",
        module="sigs.k8s.io/kwok",
        binaries={"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
    ),
    # The Gitea the tests run against by default. From 1.27 on Gitea's own module path
    # is gitea.dev; the wrapper requires it as such and replaces it by the release
    # published as code.gitea.io/gitea (see go/gitea/go.mod).
    "gitea": Component(
        name="gitea",
        module="gitea.dev",
        binaries={"gitea": "gitea.dev"},
        cgo=True,
        tags=("sqlite", "sqlite_unlock_notify"),
        copy_dirs=("templates", "options"),
        version_var="main.Version",
    ),
    # The oldest Gitea release the operator supports, for the version smoke tests
    # (Sandbox(gitea_version="oldest")).
    "gitea-oldest": Component(
        name="gitea-oldest",
        module="code.gitea.io/gitea",
        binaries={"gitea": "code.gitea.io/gitea"},
        cgo=True,
        tags=("sqlite", "sqlite_unlock_notify"),
        copy_dirs=("templates", "options"),
        wrapper_dir="gitea-1.25",
        version_var="main.Version",
    ),
    # The testbed's runner (go/runner), written here on the official workflow engine
    # gitea.com/gitea/act; its version pin is act's. It also answers to `gitea-runner`,
    # the name the runner images and the operator's scripts look for.
    "runner": Component(
        name="runner",
        module="gitea.com/gitea/act",
        binaries={"gro-testbed-runner": "."},
        aliases=(("gitea-runner", "gro-testbed-runner"),),
    ),
    # Not a peer the operator talks to: the client that lints, renders and installs
    # the Helm chart in the chart tests.
    "helm": Component(
        name="helm",
        module="helm.sh/helm/v4",
        binaries={"helm": "helm.sh/helm/v4/cmd/helm"},
    ),
    # Flux, for the GitOps suite (tests/gitops): the two controllers that fetch a Git
    # repository and apply a folder of it with health checks. Their CRDs come from the
    # same module versions (config/crd/bases in the module zip), copied from the module
    # cache into the binary cache beside the binary, never into the repository.
    "flux-source": Component(
        name="flux-source",
        module="github.com/fluxcd/source-controller",
        binaries={"source-controller": "github.com/fluxcd/source-controller"},
        copy_dirs=("config/crd/bases",),
    ),
    "flux-kustomize": Component(
        name="flux-kustomize",
        module="github.com/fluxcd/kustomize-controller",
        binaries={"kustomize-controller": "github.com/fluxcd/kustomize-controller"},
        copy_dirs=("config/crd/bases",),
    ),
    # A command line written here (go/kstatus) on sigs.k8s.io/cli-utils' kstatus, the
    # library GitOps tools read an object's health with.
    "kstatus": Component(
        name="kstatus",
        module="sigs.k8s.io/cli-utils",
        binaries={"gro-kstatus": "."},
    ),
}

# Components only the GitOps suite needs; its fixtures build them when missing.
GITOPS_COMPONENTS = ("flux-source", "flux-kustomize", "kstatus")


def log(msg: str) -> None:
    """Progress line on stderr (builds are long; say what is happening)."""
    print(f"[testbed-build {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    """The binary cache directory (outside the repository)."""
    if os.environ.get("GRO_TESTBED_CACHE"):
        return Path(os.environ["GRO_TESTBED_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "gitea-runner-operator" / "testbed"


def module_version(comp: Component) -> str:
    """The pinned version of the component's upstream module, read from the wrapper go.mod."""
    text = (comp.wrapper / "go.mod").read_text()
    m = re.search(rf"^\s*(?:require\s+)?{re.escape(comp.module)}\s+(v\S+)", text, re.M)
    # a module required under another path and replaced by this one (act's go.mod says
    # github.com/nektos/act; the runner replaces it by gitea.com/gitea/act)
    m = m or re.search(rf"=>\s*{re.escape(comp.module)}\s+(v\S+)", text)
    if not m:
        raise RuntimeError(f"{comp.name}: no require line for {comp.module} in go.mod")
    return m.group(1)


def cache_key(comp: Component) -> str:
    """component-version-hash; the hash covers go.mod, go.sum and any local Go source."""
    h = hashlib.sha256()
    wrapper = comp.wrapper
    for p in sorted(wrapper.rglob("*")):
        if p.is_file() and (p.name in ("go.mod", "go.sum") or p.suffix == ".go"):
            h.update(p.relative_to(wrapper).as_posix().encode())
            h.update(p.read_bytes())
    h.update(repr((comp.binaries, comp.cgo, comp.tags, comp.copy_dirs, comp.aliases)).encode())
    return f"{comp.name}-{module_version(comp)}-{h.hexdigest()[:12]}"


def component_dir(name: str) -> Path:
    """Where the built component lives in the cache (may not exist yet)."""
    return cache_root() / cache_key(COMPONENTS[name])


def is_built(name: str) -> bool:
    """True when the cache holds a complete build of this component."""
    return (component_dir(name) / "build.json").is_file()


def default_components() -> list[str]:
    """What ``build`` builds with no names: every component."""
    return list(COMPONENTS)


def go_available() -> bool:
    """Whether a ``go`` command is on PATH."""
    return shutil.which("go") is not None


def _go_env(comp: Component) -> dict[str, str]:
    env = dict(os.environ)
    env["CGO_ENABLED"] = "1" if comp.cgo else "0"
    # Registry/proxy settings are deliberately left as the user has them.
    return env


@contextlib.contextmanager
def cache_lock(key: str) -> Iterator[None]:
    """Hold the cache's lock for ``key`` (a component's cache key, an image's name).

    Why: parallel test workers (pytest-xdist) and a second session find an empty cache at
    the same time; without the lock both compile the same component for minutes and the
    second rename lands on the first one's finished directory. The second waits here and
    then finds the build done.
    """
    locks = cache_root() / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    with (locks / f"{key}.lock").open("w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"{key}: another process is building it; waiting for it to finish")
            fcntl.flock(f, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def build_component(name: str, force: bool = False) -> Path:
    """Build one component into the cache unless already there; return its directory.

    Under :func:`cache_lock`, so concurrent callers build it once: the waiter re-checks the
    cache after the lock is its own (unless ``force``).
    """
    dest = component_dir(name)
    if not force and (dest / "build.json").is_file():
        log(f"{name}: cached at {dest}")
        return dest
    with cache_lock(dest.name):
        if not force and (dest / "build.json").is_file():
            log(f"{name}: built meanwhile by another process, at {dest}")
            return dest
        return _build_component(name, dest)


def _build_component(name: str, dest: Path) -> Path:
    """The compile itself, into a temporary directory renamed to ``dest`` when complete."""
    comp = COMPONENTS[name]
    if not go_available():
        raise RuntimeError(
            "the 'go' command is not on PATH (install Go >= 1.26 to build the testbed)"
        )
    version = module_version(comp)
    wrapper = comp.wrapper
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    t0 = time.monotonic()
    try:
        env = _go_env(comp)
        log(f"{name}: downloading modules for {comp.module}@{version}")
        subprocess.run(["go", "mod", "download"], cwd=wrapper, env=env, check=True)
        ldflags = ["-s", "-w"]
        if comp.module == "k8s.io/kubernetes":
            ldflags += list(_kube_ldflags(version))
        if comp.version_var:
            ldflags.append(f"-X {comp.version_var}={version.lstrip('v')}")
        if name == "helm":
            ldflags.append(f"-X helm.sh/helm/v4/internal/version.version={version}")
        ldflags += list(comp.extra_ldflags)
        (tmp / "bin").mkdir()
        for binary, pkg in comp.binaries.items():
            cmd = [
                "go",
                "build",
                "-trimpath",
                "-ldflags",
                " ".join(ldflags),
                "-o",
                str(tmp / "bin" / binary),
            ]
            if comp.tags:
                cmd += ["-tags", ",".join(comp.tags)]
            cmd.append(pkg)
            log(f"{name}: go build {pkg} (cold builds take minutes; kubernetes 10-30+ min)")
            t_bin = time.monotonic()
            subprocess.run(cmd, cwd=wrapper, env=env, check=True)
            log(f"{name}: {binary} built in {time.monotonic() - t_bin:.0f}s")
        if comp.copy_dirs:
            moddir = subprocess.run(
                ["go", "list", "-m", "-f", "{{.Dir}}", comp.module],
                cwd=wrapper,
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            for d in comp.copy_dirs:
                shutil.copytree(Path(moddir) / d, tmp / "static" / d)
                copied = tmp / "static" / d
                for p in [copied, *copied.rglob("*")]:  # module cache files are read-only
                    p.chmod(0o755 if p.is_dir() else 0o644)
        for alias, target in comp.aliases:
            (tmp / "bin" / alias).symlink_to(target)
        meta = {
            "component": name,
            "module": comp.module,
            "version": version,
            "binaries": sorted(comp.binaries),
            "seconds": round(time.monotonic() - t0, 1),
        }
        (tmp / "build.json").write_text(json.dumps(meta, indent=2))
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log(f"{name}: built {comp.module}@{version} in {time.monotonic() - t0:.0f}s -> {dest}")
    return dest


def ensure_built(names: list[str] | None = None, force: bool = False) -> dict[str, Path]:
    """Build (or find cached) the named components; return component -> cache dir.

    Builds run one after another: the machines have 2 cores and Go already
    parallelises inside one build.
    """
    names = names or default_components()
    out: dict[str, Path] = {}
    t0 = time.monotonic()
    for n in names:
        out[n] = build_component(n, force=force)
    log(f"done in {time.monotonic() - t0:.1f}s: {', '.join(names)}")
    return out


def binary(name: str) -> Path:
    """Path to a built binary by its name (e.g. 'kube-apiserver'); raises if not built.

    A name two components build (``gitea``) resolves to the first, the default one.
    """
    for comp in COMPONENTS.values():
        if name in comp.binaries or name in dict(comp.aliases):
            p = component_dir(comp.name) / "bin" / name
            if not p.is_file():
                raise FileNotFoundError(f"{name} is not built; run: python -m tests.testbed build")
            return p
    raise KeyError(name)


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.testbed.build [component ...] [--force]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    force = "--force" in args
    names = [a for a in args if not a.startswith("-")] or None
    ensure_built(names, force=force)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
