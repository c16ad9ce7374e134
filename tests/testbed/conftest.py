"""Load the testbed fixtures for the testbed's own smoke tests.

Why: the project's root conftest may already list ``tests.testbed.pytest_plugin``;
registering it only when absent keeps one session-wide sandbox either way.
"""

from __future__ import annotations

import pytest

PLUGIN = "tests.testbed.pytest_plugin"


def pytest_configure(config: pytest.Config) -> None:
    """Register the fixture plugin unless the root conftest already did."""
    if not config.pluginmanager.has_plugin(PLUGIN):
        config.pluginmanager.import_plugin(PLUGIN)
