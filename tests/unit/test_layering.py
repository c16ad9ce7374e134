"""Data flows one way through the packages; this keeps it so.

ground floor: api (plain values, no I/O), settings, metrics
I/O edges:    forge (Gitea), kube (Kubernetes): never each other
decisions:    reconcile (may use api, forge's plain parts, kube)
runtime:      runtime (queue, pollers, leadership wiring)
top:          cli, health, webhook
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "gitea_runner_operator"
LEVEL = {
    "api": 0,
    "settings": 0,
    "metrics": 0,
    "logsetup": 0,
    "forge": 1,
    "kube": 1,
    "reconcile": 2,
    "runtime": 3,
    "webhook": 3,
    "health": 4,
    "uninstall": 4,
    "cli": 5,
    "__main__": 6,
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
