"""Data flows one way through the packages, and a folder says what kind of code is in it.

ground floor: api (plain values), kit (generic helpers), settings, metrics, logsetup
objects:      Kubernetes objects built and read without I/O (runner Job, cache server, views)
I/O edges:    forge (Gitea), kube (Kubernetes): never each other
decisions:    reconcile: its rules (reconcile/*.py, capacity/, status/), the why code
              (reconcile/why/), the steps of a pass (reconcile/steps/), and reconciler.py
              that runs a pass
sharding:     its pure rules (sharding/*.py: domains, tenure, forwards) over reconcile's
              rules, and its Lease I/O (sharding/leases/); reconcile never imports it
the tasks:    poll (one task per group, Gitea steps), webhook (the receiver)
runtime:      runtime (work queue, the controller's wiring, leadership)
top:          health, commands (why, uninstall); manager (the process); cli (flags)
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
    "sharding": 4,
    "poll": 5,
    "webhook": 5,
    "runtime": 6,
    "health": 7,
    "commands": 7,
    "manager": 8,
    "cli": 9,
    "__main__": 10,
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


# Purity is said by folder. api/, objects/, the rules of reconcile/ (its own files and its
# capacity/ and status/ rooms) and of sharding/ (its own files, not leases/) read and return
# data only: no I/O library however indirectly, no ``async def``. The Protocols of
# reconcile/ports.py declare async methods without a body: a declaration awaits nothing, so
# only an async function with code counts. kit/ is
# generic: no I/O library, but it may be async by nature (kit/tasks.py awaits the tasks it
# stops). reconcile/steps/ and reconcile/why/ may await the Kubernetes ports, and the one
# module that runs a pass, reconcile/reconciler.py, awaits its steps.
RULES = ("reconcile", "reconcile/capacity", "reconcile/status")
PURE_FOLDERS = ("api", "objects", *RULES, "sharding")
NO_IO_FOLDERS = ("kit", *PURE_FOLDERS)
RUNS_A_PASS = "reconcile/reconciler.py"
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


def _folder(path: Path) -> str:
    return str(path.parent.relative_to(PACKAGE))


def _declares_only(node: ast.AsyncFunctionDef) -> bool:
    """A body of a docstring and/or ``...``: a Protocol's method, not code that awaits."""
    return all(
        isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) for stmt in node.body
    )


def _runs_a_pass(path: Path) -> bool:
    return str(path.relative_to(PACKAGE)) == RUNS_A_PASS


NO_IO = [p for p in MODULES if _folder(p) in NO_IO_FOLDERS and not _runs_a_pass(p)]
PURE = [p for p in NO_IO if _folder(p) in PURE_FOLDERS]


@pytest.mark.parametrize("path", NO_IO, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_ground_and_the_decisions_reach_no_io_library(path):
    """No aiohttp or kubernetes_asyncio, however indirectly: what is decided here can be
    tested with plain values and holds the same on every replica."""
    assert not _reaches(path) & IO_LIBRARIES, f"{path.name} reaches an I/O library"


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_pure_folders_await_nothing(path):
    tree = ast.parse(path.read_text())
    coded = [
        n.name
        for n in ast.walk(tree)
        if isinstance(n, ast.AsyncFunctionDef) and not _declares_only(n)
    ]
    assert coded == [], f"{path.name} defines async functions"


def test_the_purity_rule_tells_a_declaration_from_code():
    declared, coded = ast.parse(
        "async def a(self) -> None: ...\nasync def b():\n    await c()\n"
    ).body
    assert isinstance(declared, ast.AsyncFunctionDef) and isinstance(coded, ast.AsyncFunctionDef)
    assert _declares_only(declared)
    assert not _declares_only(coded)


# Inside reconcile/: rules < why < steps < reconciler.py. A rule imports no step and no why
# code (a decision never waits on how a pass acts), and the why code imports no step (it
# reads the pass after the fact).
RECONCILE_ROOMS = {**dict.fromkeys(RULES, 0), "reconcile/why": 1, "reconcile/steps": 2}


def _reconcile_room(module: str) -> str | None:
    parts = module.split(".")[1:]
    if parts[:1] != ["reconcile"]:
        return None
    if len(parts) > 1 and parts[1] in ("why", "steps"):
        return f"reconcile/{parts[1]}"
    if len(parts) > 1 and parts[1] == "reconciler":
        return RUNS_A_PASS
    return "reconcile"


RECONCILE = [p for p in MODULES if _folder(p).startswith("reconcile") and not _runs_a_pass(p)]


@pytest.mark.parametrize("path", RECONCILE, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_rules_import_no_step_and_the_why_code_no_step(path):
    rel = str(path.relative_to(PACKAGE))
    room = RECONCILE_ROOMS[_folder(path)]
    for module in _module_imports(path):
        target = _reconcile_room(module)
        if target is None:
            continue
        assert target != RUNS_A_PASS, f"{rel} imports the reconciler"
        assert RECONCILE_ROOMS[target] <= room, f"{rel} ({_folder(path)}) imports {module}"
