"""Test-suite wiring: the testbed's fixtures (session-wide sandbox, skip/fail rules) for the
suites against the testbed, and the markers each folder sets.
Unit tests never touch the fixtures, so they need nothing but Python."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.kinds import kinds_of
from tests.support.workers import MACHINE_GROUP, work_group

pytest_plugins = ["tests.testbed.pytest_plugin"]
TESTS = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test's folder says what it needs (tests/unit nothing, tests/e2e a runner on the
    testbed, ...): mark it so, before ``-m`` selects, so a file's place decides its suite.

    The real node's tests go first: under pytest-xdist they run on one worker, one after
    another, the longest unit of work; started first, it does not end the run alone while
    the other workers idle.
    """
    for item in items:
        for kind in sorted(kinds_of(item.path.relative_to(TESTS))):
            item.add_marker(kind)
    items.sort(key=lambda item: work_group(item.nodeid, config.rootpath) != MACHINE_GROUP)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` (tox -e py): xdist's scope scheduler with the units of work of
    tests/support/workers.py (the real node's tests together on one worker, a module sharing
    a fixture together, every other test alone). Other ``--dist`` modes stay xdist's own."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_group(nodeid, config.rootpath)

    return GroupScheduling(config, log)


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
