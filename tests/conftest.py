"""Test-suite wiring: the testbed's fixtures (session-wide sandbox, skip/fail rules) for the
integration and e2e suites. Unit tests never touch them, so they need nothing but Python."""

pytest_plugins = ["tests.testbed.pytest_plugin"]
