"""Which tests pytest-xdist must keep together on one worker (tests/conftest.py's scheduler).

Why a rule by path rather than ``xdist_group`` marks: with pytest 9.2, xdist 3.8's
``--dist loadgroup`` no longer sees the marks (it appends the group to a node id that pytest
now stores elsewhere, pytest-dev/pytest-xdist#1386) and silently spreads a group over every
worker. The controller only knows node ids, so the rule reads the node id and the module's
source: nothing to mark, nothing that a newer pytest can drop.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path, PurePosixPath

from tests.support.kinds import kinds_of

# The group of the tests that use a resource of the whole machine: the real node (one
# kubelet and containerd, fixed paths under /run and /var/lib, the CNI bridge, the images
# and the operator's image imported into it, the Helm release installed on it).
MACHINE_GROUP = "machine"
SHARED_SCOPES = frozenset({"module", "package", "session"})


def defines_shared_fixture(source: str) -> bool:
    """Whether a module defines a fixture wider than a test (``scope="module"``, ...): such a
    fixture is set up once per worker, and the tests sharing it may rely on their order (one
    Helm release walked through install, upgrade and uninstall)."""
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for deco in node.decorator_list:
            if isinstance(deco, ast.Call) and any(
                k.arg == "scope"
                and isinstance(k.value, ast.Constant)
                and k.value.value in SHARED_SCOPES
                for k in deco.keywords
            ):
                return True
    return False


@functools.cache
def _module_shares_fixture(path: Path) -> bool:
    try:
        return defines_shared_fixture(path.read_text())
    except (OSError, SyntaxError):
        return False


def work_group(nodeid: str, rootdir: Path) -> str:
    """The unit of work ``nodeid`` belongs to: :data:`MACHINE_GROUP` for the real node's
    tests (one worker, one after another), the module for a module sharing a fixture, else
    the test alone (any worker)."""
    module = nodeid.split("::", 1)[0]
    parts = PurePosixPath(module).parts
    if len(parts) > 1 and parts[0] == "tests":
        if "real_node" in kinds_of(PurePosixPath(*parts[1:])):
            return MACHINE_GROUP
        if _module_shares_fixture(rootdir / module):
            return module
    return nodeid
