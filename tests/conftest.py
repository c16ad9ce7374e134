"""Test-suite wiring: the testbed's fixtures (session-wide sandbox, skip/fail rules) for the
suites against the testbed, and the markers each folder sets.
Unit tests never touch the fixtures, so they need nothing but Python."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.kinds import kinds_of

pytest_plugins = ["tests.testbed.pytest_plugin"]
TESTS = Path(__file__).resolve().parent


# The pytest-xdist group of the tests that use a resource of the whole machine: the real
# node (one kubelet and containerd, fixed paths under /run and /var/lib, the CNI bridge, the
# images and the operator's image imported into it, the Helm release installed on it).
MACHINE_GROUP = "machine"


def worker_group(item: pytest.Item) -> str | None:
    """The xdist group that keeps ``item`` on one worker with others, or None (any worker).

    Why: under ``--dist loadgroup`` each worker starts its own testbed, which isolates
    everything but the machine's real node (:data:`MACHINE_GROUP`); and a module-scoped
    fixture is set up once per worker, so the tests sharing one (two Gitea releases started
    once, a Helm release walked through install, upgrade and uninstall) stay together.
    """
    if "real_node" in kinds_of(item.path.relative_to(TESTS)):
        return MACHINE_GROUP
    if isinstance(item, pytest.Function):
        defs = item._fixtureinfo.name2fixturedefs.values()
        if any(d.scope == "module" for chain in defs for d in chain):
            return item.path.relative_to(TESTS).as_posix()
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test's folder says what it needs (tests/unit nothing, tests/e2e a runner on the
    testbed, ...): mark it so, before ``-m`` selects, so a file's place decides its suite.

    The machine's group goes first: it runs serially on one worker and is the longest unit
    of work, so started first it does not end the run alone while the other workers idle.
    """
    for item in items:
        for kind in sorted(kinds_of(item.path.relative_to(TESTS))):
            item.add_marker(kind)
        group = worker_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: worker_group(item) != MACHINE_GROUP)  # stable: order kept


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
