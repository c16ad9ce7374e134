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


def test_the_poll_tasks_steps_take_the_settings_deadline():
    assert _numbers_given_to(PACKAGE / "poll" / "poller.py", {"timeout"}) == []
    assert REQUEST_TIMEOUT == 10.0
