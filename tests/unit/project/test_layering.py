"""Data flows one way through the packages; this keeps it so.

ground floor: api (plain values, no I/O), settings, metrics
objects:      Kubernetes objects built and read without I/O (runner Job, cache server, views)
I/O edges:    forge (Gitea), kube (Kubernetes): never each other
decisions:    reconcile (may use api, forge's plain parts, kube)
runtime:      runtime (queue, pollers, leadership wiring)
top:          health, why, webhook; manager (the process); cli (flags)
"""

import ast
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

PACKAGE = REPO_ROOT / "gitea_runner_operator"
LEVEL = {
    "api": 0,
    "kit": 0,
    "settings": 0,
    "metrics": 0,
    "logsetup": 0,
    "objects": 1,
    "forge": 2,
    "kube": 2,
    "reconcile": 3,
    "poll": 4,
    "webhook": 4,
    "runtime": 5,
    "health": 6,
    "commands": 6,
    "manager": 7,
    "cli": 8,
    "__main__": 9,
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {
        m.split(".")[1]
        for m in found
        if m.startswith("gitea_runner_operator.") and len(m.split(".")) > 1
    }


def _layer(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if _layer(p) != "__init__")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down_only(path):
    layer = _layer(path)
    assert layer in LEVEL, f"new top-level module {layer}: give it a level in this test"
    for target in _imports(path) - {layer}:
        assert target in LEVEL, f"{path.name} imports unknown layer {target}"
        assert LEVEL[target] < LEVEL[layer] or (LEVEL[target] == LEVEL[layer] == 0), (
            f"{layer} (level {LEVEL[layer]}) must not import {target} (level {LEVEL[target]})"
        )


def test_the_pure_layers_do_no_io():
    for path in (PACKAGE / "api").rglob("*.py"):
        imported = ast.dump(ast.parse(path.read_text()))
        for io in ("aiohttp", "kubernetes_asyncio"):
            assert io not in imported, f"{path.name} imports {io}"


# The pure floors: plain values (api/) and the decisions of reconcile/, which read and return
# data only. Their I/O-facing neighbours in reconcile/ are named here; any other module there
# is a decision, and new I/O belongs in kube/, forge/ or these. kit/tasks.py does no I/O
# but awaits tasks that do (how a stop ends them), so it is async.
PURE_FLOORS = ("api", "kit", "objects", "reconcile")
NOT_PURE = {
    "kit/tasks.py",
    "reconcile/reconciler.py",
    "reconcile/steps/jobcache.py",
    "reconcile/ports.py",
    "reconcile/steps/report.py",
    "reconcile/steps/create.py",
    "reconcile/steps/teardown.py",
    "reconcile/steps/losses.py",
    "reconcile/steps/marks.py",
    "reconcile/steps/jobcache_writes.py",
    "reconcile/why/unmatched_book.py",
    "reconcile/steps/status_writes.py",
}
IO_LIBRARIES = {"aiohttp", "kubernetes_asyncio"}


def _module_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _package_path(module: str) -> Path | None:
    parts = module.split(".")[1:]
    for candidate in (PACKAGE.joinpath(*parts).with_suffix(".py"), PACKAGE.joinpath(*parts)):
        if candidate.is_file():
            return candidate
        if candidate.is_dir() and (candidate / "__init__.py").is_file():
            return candidate / "__init__.py"
    return None


def _reaches(path: Path) -> set[str]:
    """Every outside library the module imports, itself or through package modules."""
    seen: set[Path] = set()
    outside: set[str] = set()
    todo = [path]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for module in _module_imports(current):
            if module.startswith("gitea_runner_operator"):
                target = _package_path(module)
                if target is not None:
                    todo.append(target)
            else:
                outside.add(module.split(".")[0])
    return outside


PURE = [
    p for p in MODULES if _layer(p) in PURE_FLOORS and str(p.relative_to(PACKAGE)) not in NOT_PURE
]


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_pure_floors_do_no_io(path):
    """No aiohttp or kubernetes_asyncio (however indirectly) and no ``async def``: what is
    decided here can be tested with plain values and holds the same on every replica."""
    assert not _reaches(path) & IO_LIBRARIES, f"{path.name} reaches an I/O library"
    tree = ast.parse(path.read_text())
    assert not any(isinstance(n, ast.AsyncFunctionDef) for n in ast.walk(tree)), (
        f"{path.name} defines an async function"
    )
