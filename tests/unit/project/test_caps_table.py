"""The table "Tenant inputs and their caps" in docs/security.md and the code hold each other
true: every cap constant of the tenant edge is in the table, every ``NAME = value`` in the
table is the code's value, and every test the table names exists."""

from __future__ import annotations

import ast
import importlib
import re
from typing import Any

from gitea_runner_operator.api import caps
from tests.support import REPO_ROOT

DOC = REPO_ROOT / "docs" / "security.md"
HEADING = "## Tenant inputs and their caps"
# Where the table's constants live; api/caps.py's are all required, the others by name.
MODULES = [
    "gitea_runner_operator.api.caps",
    "gitea_runner_operator.forge.limits",
    "gitea_runner_operator.forge.refusals",
    "gitea_runner_operator.reconcile.capacity.accounting",
    "gitea_runner_operator.kube.secret_store",
    "gitea_runner_operator.kube.configmaps",
    "gitea_runner_operator.webhook.server",
    "gitea_runner_operator.webhook.guard",
    "gitea_runner_operator.webhook.verify",
    "gitea_runner_operator.webhook.routing",
]
ALSO_REQUIRED = {
    "gitea_runner_operator.forge.limits": (
        "ANSWER_MAX_BYTES", "ANSWER_MAX_VALUES", "MAX_JSON_DEPTH",
        "OBSERVATION_MAX_BYTES", "OBSERVATION_MAX_ITEMS",
    ),
    "gitea_runner_operator.forge.refusals": ("INTERVAL", "MAX_KEYS"),
    "gitea_runner_operator.reconcile.capacity.accounting": ("MEMO_ENTRIES", "MEMO_KEY_MAX_CHARS"),
}  # fmt: skip
_ASSIGNED = re.compile(r"`([A-Z][A-Z0-9_]+) = ([0-9_. *+<]+)`")
_TEST = re.compile(r"`((?:unit|integration|faults|e2e|real_node)/[\w/]+\.py)(?:::(\w+))?`")


def section() -> str:
    text = DOC.read_text()
    start = text.index(HEADING)
    end = text.find("\n## ", start + len(HEADING))
    return text[start : end if end >= 0 else len(text)]


def arithmetic(expr: str) -> float:
    """``64 * 1024``, ``1 << 20``, ``10_000``: numbers and these operators only."""

    def value(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.BinOp):
            left, right = value(node.left), value(node.right)
            ops = {ast.Mult: left * right, ast.Add: left + right}
            if isinstance(node.op, ast.LShift):
                return left << right
            return ops[type(node.op)]
        raise ValueError(f"not arithmetic: {expr!r}")

    return value(ast.parse(expr.strip(), mode="eval").body)


def written() -> dict[str, float]:
    return {name: arithmetic(expr) for name, expr in _ASSIGNED.findall(section())}


def caps_constants() -> dict[str, float]:
    return {
        name: value
        for name, value in vars(caps).items()
        if name.isupper() and isinstance(value, int | float) and not isinstance(value, bool)
    }


def test_every_cap_constant_is_in_the_table():
    table = written()
    required = set(caps_constants())
    for names in ALSO_REQUIRED.values():
        required.update(names)
    assert sorted(required - set(table)) == []


def test_every_value_in_the_table_is_the_codes():
    modules = [importlib.import_module(m) for m in MODULES]
    wrong = []
    for name, value in written().items():
        found = [getattr(m, name) for m in modules if hasattr(m, name)]
        if len(found) != 1 or found[0] != value:
            wrong.append(f"{name} = {value} (code: {found})")
    assert wrong == []


def test_every_test_the_table_names_exists():
    missing = []
    for path, name in _TEST.findall(section()):
        file = REPO_ROOT / "tests" / path
        if not file.is_file():
            missing.append(path)
        elif name and not re.search(rf"^(async )?def {name}\(", file.read_text(), re.M):
            missing.append(f"{path}::{name}")
    assert missing == []


def test_the_checks_see_a_missing_cap_a_wrong_value_and_a_missing_test():
    assert arithmetic("64 * 1024") == 65536 and arithmetic("1 << 20") == 1 << 20
    assert set(caps_constants()) >= {"SPEC_LABELS_MAX", "TEMPLATE_MAX_BYTES"}
    assert _ASSIGNED.findall("`X_MAX = 10_000`") == [("X_MAX", "10_000")]
    assert _TEST.findall("`unit/a/test_b.py::test_c`") == [("unit/a/test_b.py", "test_c")]
