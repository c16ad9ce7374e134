"""The operator's own image, built here without a registry, for the real-node install suite.

``Containerfile`` stays the published recipe; nothing here can pull its ``python:…-slim``
base, so this builds the same image from Debian packages, as :mod:`tests.testbed.images`
builds the runner images: Debian bookworm's ``python3`` (3.11, the Containerfile's minor
version) from ``mmdebstrap`` with the machine's own apt sources, the wheel built from this
checkout installed with its dependencies (``pip install --target`` with the host's Python
3.11, so the compiled dependencies match the image's interpreter), a small entry-point
script, user 65532, nothing written to the root filesystem, the same ENTRYPOINT, ENV and
EXPOSE. ``tests/unit/project/test_operator_image_recipe.py`` keeps these constants in step with
``Containerfile``.

The tag is the package's ``__version__`` under the name the chart's default
``image.repository`` resolves to (``gitea-runner-operator`` is ``docker.io/library/…`` to
the kubelet), so ``helm install`` with only ``pullPolicy: Never`` finds it.
"""

from __future__ import annotations

import hashlib
import inspect
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from gitea_runner_operator import __version__

from . import images
from .build import cache_lock

REPO = Path(__file__).resolve().parents[2]
NAME = "gitea-runner-operator"
REF = f"{NAME}:{__version__}"
# What the kubelet asks containerd for when a Pod says image: gitea-runner-operator:<tag>.
KUBELET_NAME = f"docker.io/library/{NAME}"

# Kept in step with Containerfile (unit-tested).
PYTHON_MINOR = (3, 11)
USER = "65532:65532"
ENTRYPOINT = ["gitea-runner-operator"]
ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
EXPOSED_PORTS = (8081, 8082)
PACKAGES = ("python3", "ca-certificates")
SITE = "usr/local/lib/python{}.{}/dist-packages".format(*PYTHON_MINOR)

# What pip would write as the console script, without the host interpreter's path.
ENTRY_SCRIPT = """#!/usr/bin/python3
import sys

from gitea_runner_operator.cli import main

sys.exit(main())
"""


def _sources() -> list[Path]:
    """What the wheel is made of: the cache key covers every byte of it."""
    files = [REPO / "pyproject.toml", REPO / "README.md", REPO / "LICENSE"]
    files += sorted(p for p in (REPO / "gitea_runner_operator").rglob("*") if p.is_file())
    return [p for p in files if "__pycache__" not in p.parts]


def image_path() -> Path:
    """The cached OCI tarball, keyed by this recipe, the package's sources and the suite."""
    h = hashlib.sha256(repr((REF, PACKAGES, USER, ENTRYPOINT, ENV, EXPOSED_PORTS)).encode())
    h.update((SITE + ENTRY_SCRIPT).encode())
    for part in (build, _root_owned, images.mmdebstrap, images.oci_image):
        h.update(inspect.getsource(part).encode())
    h.update(images.debian_suite().encode())
    for f in _sources():
        h.update(str(f.relative_to(REPO)).encode() + b"\0" + f.read_bytes())
    return images.images_dir() / f"{NAME}_{__version__}-{h.hexdigest()[:12]}.tar"


def _host_python() -> str:
    """A host interpreter of the image's minor version: pip resolves and compiles for it."""
    if sys.version_info[:2] == PYTHON_MINOR:
        return sys.executable
    found = shutil.which("python{}.{}".format(*PYTHON_MINOR))
    if not found:
        raise RuntimeError("building the operator image needs Python {}.{} on the host")
    return found


def _pip(*args: str, cwd: Path | None = None) -> None:
    argv = [_host_python(), "-m", "pip", "--disable-pip-version-check", "--quiet", *args]
    out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"pip {args[0]} failed ({out.returncode}): {out.stderr[-2000:]}")


def build(work: Path, out: Path) -> None:
    """Base layer (Debian + python3), then the package layer; see the module docstring."""
    base = work / "debian.tar"
    check = f"import sys; assert sys.version_info[:2] == {PYTHON_MINOR}, sys.version"
    images.mmdebstrap(base, PACKAGES, (f"chroot \"$1\" python3 -c '{check}'",))
    # The wheel from this checkout, in a copy so no build/ or egg-info lands in the tree.
    src = work / "src"
    shutil.copytree(REPO / "gitea_runner_operator", src / "gitea_runner_operator",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, src / name)
    wheels = work / "wheels"
    _pip("wheel", "--no-deps", "--no-cache-dir", "--wheel-dir", str(wheels), str(src))
    (wheel,) = wheels.glob("*.whl")
    site = work / "site"
    _pip("install", "--no-cache-dir", "--no-warn-script-location", "--target", str(site),
         str(wheel))  # fmt: skip
    shutil.rmtree(site / "bin", ignore_errors=True)  # scripts naming the host's interpreter
    top = work / "operator.tar"
    with tarfile.open(top, "w") as tar:
        for parent in reversed(Path(SITE).parents[:-1]):
            images._add_dir(tar, str(parent))
        tar.add(site, SITE, filter=_root_owned)
        images._add_file(tar, "usr/local/bin/" + ENTRYPOINT[0], ENTRY_SCRIPT.encode(), 0o755)
    config: dict[str, list[str] | str] = {
        "entrypoint": ENTRYPOINT,
        "env": [images.PATH_ENV, *(f"{k}={v}" for k, v in ENV.items())],
        "user": USER,
        "exposedports": [f"{p}/tcp" for p in EXPOSED_PORTS],
        "label": [
            f"org.opencontainers.image.title={NAME}",
            f"org.opencontainers.image.version={__version__}",
            "org.opencontainers.image.licenses=Apache-2.0",
        ],
    }
    images.oci_image(out, REF, [base, top], config)


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Files owned by root and not writable by the image's user (read-only root friendly)."""
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mode &= 0o755
    return info


def ensure_image() -> Path:
    """Build the image unless cached; return its OCI layout tarball."""
    out = image_path()
    if out.is_file():
        images.log(f"{REF}: cached ({out.name})")
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with cache_lock(out.stem), tempfile.TemporaryDirectory(dir=out.parent, prefix=".build-") as tmp:
        if out.is_file():  # another process built it while this one waited for the lock
            return out
        partial = Path(tmp) / "image.tar"
        build(Path(tmp), partial)
        partial.rename(out)
    for old in out.parent.glob(f"{NAME}_*.tar"):
        if old != out:
            old.unlink()
    images.log(f"{REF}: built in {time.monotonic() - t0:.0f}s ({out.stat().st_size >> 20} MiB)")
    return out


def import_image(node: Any, tags: tuple[str, ...] = ()) -> list[str]:
    """Import the image into the real node's containerd under the kubelet's name, plus each of
    ``tags`` as another tag of the same image (an "upgrade" without a second build); returns
    the references a Pod spec uses."""
    tarball = ensure_image()
    node.ctr("images", "import", "--base-name", KUBELET_NAME, str(tarball))
    first = f"{KUBELET_NAME}:{__version__}"
    for tag in tags:
        node.ctr("images", "tag", "--force", first, f"{KUBELET_NAME}:{tag}")
    return [f"{NAME}:{t}" for t in (__version__, *tags)]
