"""Test-suite wiring: the testbed's fixtures (session-wide sandbox, skip/fail rules) for the
integration and e2e suites. Unit tests never touch them, so they need nothing but Python."""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.testbed.pytest_plugin"]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI (CI=true) or with GRO_REQUIRE_TESTBED=1 a skipped test fails the run: a suite
    that did not run must never count as passing."""
    from tests.testbed.pytest_plugin import testbed_required  # registered above, import late

    if not testbed_required() or exitstatus != 0:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter else 0
    if skipped:
        if reporter:
            reporter.write_line(f"{skipped} test(s) skipped: a skip fails the run in CI", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
