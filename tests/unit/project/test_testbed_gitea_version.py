"""Choosing the testbed's Gitea release: a wrong choice must fail loudly, naming the knob,
and never fall back silently to another release (the version tests would then prove nothing)."""

from __future__ import annotations

import pytest

from tests.testbed import build
from tests.testbed.sandbox import gitea_component


def test_default_and_oldest_map_to_their_own_components(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GRO_TESTBED_GITEA", raising=False)
    assert gitea_component() == "gitea"
    assert gitea_component("oldest") == "gitea-oldest"
    assert build.module_version(build.COMPONENTS["gitea"]).startswith("v1.27.")
    assert build.module_version(build.COMPONENTS["gitea-oldest"]).startswith("v1.25.")


def test_environment_picks_the_release(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRO_TESTBED_GITEA", "oldest")
    assert gitea_component() == "gitea-oldest"
    assert gitea_component("default") == "gitea"  # an explicit argument wins


def test_unknown_release_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRO_TESTBED_GITEA", "1.24")
    with pytest.raises(ValueError, match=r"GRO_TESTBED_GITEA.*'1\.24'"):
        gitea_component()
