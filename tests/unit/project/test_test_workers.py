"""The units of work pytest-xdist hands to its workers (tests/support/workers.py): the real
node's tests on one worker, a module sharing a fixture on one worker, every other test alone."""

from __future__ import annotations

from tests.support import REPO_ROOT
from tests.support.workers import MACHINE_GROUP, defines_shared_fixture, work_group


def test_every_real_node_test_is_in_the_machines_group_and_nothing_else_is() -> None:
    real_node = [p for p in (REPO_ROOT / "tests/real_node").glob("test_*.py")]
    assert real_node
    for path in real_node:
        nodeid = f"{path.relative_to(REPO_ROOT).as_posix()}::test_x[dind]"
        assert work_group(nodeid, REPO_ROOT) == MACHINE_GROUP
    e2e = "tests/e2e/test_e2e.py::test_a_workflow_runs"
    assert work_group(e2e, REPO_ROOT) == e2e
    unit = "tests/unit/project/test_test_workers.py::test_x"
    assert work_group(unit, REPO_ROOT) == unit


def test_a_module_sharing_a_fixture_stays_together() -> None:
    nodeid = "tests/integration/test_gitea_versions.py::test_x[oldest]"
    assert work_group(nodeid, REPO_ROOT) == "tests/integration/test_gitea_versions.py"


def test_only_a_fixture_wider_than_a_test_makes_a_module_one_unit() -> None:
    assert defines_shared_fixture('@pytest.fixture(scope="module")\ndef f(): pass\n')
    assert defines_shared_fixture(
        '@pytest.fixture(scope="module", params=[1])\nasync def f(): pass\n'
    )
    assert not defines_shared_fixture("@pytest.fixture\ndef f(): pass\n")
    assert not defines_shared_fixture('@pytest.fixture(scope="function")\ndef f(): pass\n')
