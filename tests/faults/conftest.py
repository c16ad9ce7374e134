"""The fault-injection suite runs the operator against the testbed: the shared fixtures."""

from tests.support.fixtures import *  # noqa: F403
