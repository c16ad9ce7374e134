"""Lazy re-exporting packages: a package whose ``__init__`` imports every submodule only to
re-export their names is replaced by one that imports a submodule when a name is first read.

Why: ``kubernetes_asyncio.client`` is generated code whose ``__init__`` imports 946 modules
(every API group and every model of every Kubernetes version it knows). The operator uses a
handful of APIs and, reading raw JSON, almost no models; importing them all cost about 40 MB
of RSS in every replica, a fifth of its memory at 1,000 groups (docs/benchmarks.md). The
names exported stay the same (read from the package's own ``__init__`` source), so code
that uses the package cannot tell, except that a submodule is imported on first use.
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any


class LazyPackage(types.ModuleType):
    """A package module whose re-exported names are imported on first access (PEP 562)."""

    def __init__(self, name: str, origin: Path, exports: dict[str, str]) -> None:
        super().__init__(name)
        self.__file__ = str(origin)
        self.__path__ = [str(origin.parent)]
        self.__package__ = name
        self._exports = exports

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        target = self._exports.get(attr)
        if target is not None:
            value = getattr(importlib.import_module(target), attr)
        else:
            try:
                value = importlib.import_module(f"{self.__name__}.{attr}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{self.__name__}.{attr}":
                    raise
                raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}") from exc
        setattr(self, attr, value)
        return value

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self._exports})


def make_lazy(name: str) -> bool:
    """Put a lazy stand-in for package ``name`` into ``sys.modules``, unless it is already
    imported or its ``__init__`` does more than re-export (``from x import y`` lines, a
    docstring, ``__version__``, ``__all__``): then it is left alone, as laziness must never
    change what a package does. True when installed."""
    if name in sys.modules:
        return False
    parent, _, child = name.rpartition(".")
    parent_spec = importlib.util.find_spec(parent) if parent else None
    locations = parent_spec.submodule_search_locations if parent_spec else None
    spec = importlib.machinery.PathFinder.find_spec(child or name, locations)
    if spec is None or spec.origin is None or not spec.submodule_search_locations:
        return False
    origin = Path(spec.origin)
    exports = _reexports(ast.parse(origin.read_text()))
    if not exports:
        return False
    module = LazyPackage(name, origin, exports)
    module.__spec__ = spec
    module.__loader__ = spec.loader
    sys.modules[name] = module
    return True


def _reexports(tree: ast.Module) -> dict[str, str] | None:
    """name -> module it comes from, or None when the ``__init__`` does anything else."""
    exports: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "__future__":
                continue
            for alias in node.names:
                if alias.name == "*":
                    return None
                exports[alias.asname or alias.name] = node.module
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        elif isinstance(node, ast.Assign) and all(
            isinstance(t, ast.Name) and t.id in ("__version__", "__all__") for t in node.targets
        ):
            continue
        else:
            return None
    return exports
