"""The test suite's own layout rules: shared things live in tests/support/ or a conftest.py,
never in a test module another one imports; and a test's folder decides its kind markers, so
no module may claim a kind its folder does not set (it would leave or join ``-m`` selections
behind its folder's back)."""

from __future__ import annotations

import ast
from pathlib import Path, PurePath

from tests.support import REPO_ROOT
from tests.support.kinds import KIND_MARKERS, kinds_of

TESTS = REPO_ROOT / "tests"


def _modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "go" not in p.relative_to(TESTS).parts)


def imported_test_modules(source: str) -> list[str]:
    """The test modules (``test_*``) that ``source`` imports anything from."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found += [n for n in names if n.startswith("tests.") and _is_test_module(n)]
    return found


def _is_test_module(dotted: str) -> bool:
    return any(part.startswith("test_") for part in dotted.split(".")[1:])


def _marker_names(node: ast.expr) -> list[str]:
    """``pytest.mark.x`` names in a marker expression (one marker or a list of them)."""
    items = node.elts if isinstance(node, ast.List | ast.Tuple) else [node]
    names = []
    for item in items:
        target = item.func if isinstance(item, ast.Call) else item
        if isinstance(target, ast.Attribute):
            names.append(target.attr)
    return names


def wrong_kinds(relative: PurePath, source: str) -> list[str]:
    """Kind markers in ``source`` that disagree with the folder of ``relative``: a module's
    ``pytestmark`` may name only its folder's kinds; a unit test may name none at all."""
    allowed = kinds_of(relative)
    wrong = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            wrong += [
                f"{relative}: pytestmark {m}"
                for m in _marker_names(node.value)
                if m in KIND_MARKERS and m not in allowed
            ]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and (
            not allowed
        ):
            wrong += [
                f"{relative}: {node.name} @{m}"
                for d in node.decorator_list
                for m in _marker_names(d)
                if m in KIND_MARKERS
            ]
    return wrong


def test_no_test_module_imports_from_another_test_module():
    offenders = {
        str(path.relative_to(TESTS)): found
        for path in _modules()
        if (found := imported_test_modules(path.read_text()))
    }
    assert offenders == {}


def test_the_import_rule_catches_each_way_of_importing_a_test_module():
    assert imported_test_modules("from tests.unit.kube.test_cache import FakeCache\n") == [
        "tests.unit.kube.test_cache",
        "tests.unit.kube.test_cache.FakeCache",
    ]
    assert imported_test_modules("from tests.integration import test_crd\n") == [
        "tests.integration.test_crd"
    ]
    assert imported_test_modules("def f():\n    import tests.e2e.test_e2e\n") == [
        "tests.e2e.test_e2e"
    ]
    assert imported_test_modules("from tests.support.testbed import runner_jobs\n") == []


def test_no_module_sets_a_kind_marker_its_folder_does_not():
    wrong = [
        w for path in _modules() for w in wrong_kinds(path.relative_to(TESTS), path.read_text())
    ]
    assert wrong == []


def test_the_kind_rule_catches_a_module_or_a_unit_test_claiming_another_kind():
    marked = "import pytest\npytestmark = [pytest.mark.integration, pytest.mark.faults]\n"
    assert wrong_kinds(PurePath("integration/test_x.py"), marked) == [
        "integration/test_x.py: pytestmark faults"
    ]
    assert wrong_kinds(PurePath("faults/test_x.py"), marked) == []
    unit = "import pytest\n@pytest.mark.e2e\ndef test_y():\n    pass\n"
    assert wrong_kinds(PurePath("unit/kube/test_x.py"), unit) == [
        "unit/kube/test_x.py: test_y @e2e"
    ]
    assert wrong_kinds(PurePath("unit/test_x.py"), marked) == [
        "unit/test_x.py: pytestmark integration",
        "unit/test_x.py: pytestmark faults",
    ]


def test_each_kind_folder_sets_the_markers_its_tests_need():
    assert kinds_of(PurePath("unit/reconcile/test_x.py")) == frozenset()
    assert kinds_of(PurePath("e2e/test_x.py")) == {"integration", "e2e"}
    assert kinds_of(PurePath("real_node/test_x.py")) == {"integration", "e2e", "real_node"}
    assert kinds_of(PurePath("faults/test_x.py")) == {"integration", "faults"}
    assert kinds_of(PurePath("gitops/test_x.py")) == {"integration", "gitops"}
