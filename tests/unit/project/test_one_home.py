"""Timeouts are written once: every Kubernetes request uses kube/http.REQUEST_TIMEOUT, and
the poll task's Gitea steps use Settings.gitea_step_deadline, not numbers of their own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gitea_runner_operator.kube.http import REQUEST_TIMEOUT
from tests.support import REPO_ROOT

PACKAGE = REPO_ROOT / "gitea_runner_operator"


def _numbers_given_to(path: Path, names: set[str]) -> list[str]:
    """Keyword arguments and calls in ``names`` given a literal number."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else None
            if callee in names and any(isinstance(a, ast.Constant) for a in node.args):
                found.append(f"{path.name}:{node.lineno} {callee}(<number>)")
            for kw in node.keywords:
                if kw.arg in names and isinstance(kw.value, ast.Constant):
                    found.append(f"{path.name}:{node.lineno} {kw.arg}=<number>")
    return found


@pytest.mark.parametrize("path", sorted((PACKAGE / "kube").glob("*.py")), ids=lambda p: p.name)
def test_kubernetes_requests_take_the_one_timeout(path):
    assert _numbers_given_to(path, {"_request_timeout"}) == []
    constants = [
        n.targets[0].id
        for n in ast.parse(path.read_text()).body
        if isinstance(n, ast.Assign)
        and isinstance(n.targets[0], ast.Name)
        and "TIMEOUT" in n.targets[0].id
        and isinstance(n.value, ast.Constant)
    ]
    assert path.name == "http.py" or constants == [], f"{path.name} writes its own {constants}"


def _own_timeouts(path: Path) -> list[str]:
    """Module constants and parameter defaults named like a timeout that are a bare number."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and "TIMEOUT" in target.id:
            found += [target.id] if isinstance(node.value, ast.Constant) else []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            named = [
                *zip(args.args[::-1], args.defaults[::-1], strict=False),
                *zip(args.kwonlyargs, args.kw_defaults, strict=True),
            ]
            found += [
                f"{node.name}({arg.arg}=<number>)"
                for arg, default in named
                if "timeout" in arg.arg and isinstance(default, ast.Constant)
            ]
    return found


@pytest.mark.parametrize(
    "path",
    [
        *sorted((PACKAGE / "kube").glob("*.py")),
        PACKAGE / "runtime" / "leadership.py",
        PACKAGE / "sharding" / "leases" / "membership.py",
    ],
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_kubernetes_timeouts_outside_kube_http_have_no_number_of_their_own(path):
    """The Lease calls and the scrape reviews too: their timeouts are kube/http's."""
    assert path.name == "http.py" or _own_timeouts(path) == []


def test_the_poll_tasks_steps_take_the_settings_deadline():
    assert _numbers_given_to(PACKAGE / "poll" / "poller.py", {"timeout"}) == []
    assert _numbers_given_to(PACKAGE / "poll" / "task_faults.py", {"timeout"}) == []
    assert REQUEST_TIMEOUT == 10.0
