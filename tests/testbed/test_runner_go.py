"""The testbed runner's own Go tests (label grammar, the cache server's isolation): they run
with the suite, so a change to the runner that breaks them fails CI like any other test.

Why here and not only in the runner's module: CI runs exactly the README's test command, and
a Go test nobody runs proves nothing."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from . import build

pytestmark = pytest.mark.integration


def test_the_runners_go_tests_and_vet_pass() -> None:
    if shutil.which("go") is None:
        pytest.fail("the testbed runner's Go tests need `go` on PATH")
    wrapper = build.COMPONENTS["runner"].wrapper
    for argv in (["go", "vet", "./..."], ["go", "test", "-count=1", "./..."]):
        out = subprocess.run(
            argv, cwd=wrapper, capture_output=True, text=True, timeout=600, check=False
        )
        assert out.returncode == 0, f"{' '.join(argv)}:\n{out.stdout}\n{out.stderr}"
