"""Choosing the runner the e2e tests run: the real Gitea Runner whenever it can be had, the
stand-in only as a loud fallback, and never the stand-in in CI (a suite that ran it would
prove nothing about the real runner)."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.testbed import build, runners


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """An empty binary cache and no runner knobs set."""
    for name in ("CI", "GRO_REQUIRE_TESTBED", "GRO_TESTBED_RUNNER_SRC", "GRO_TESTBED_RUNNER_BIN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GRO_TESTBED_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(runners, "_USED", [])  # keep this session's runner report clean
    runners._resolve.cache_clear()
    yield tmp_path
    runners._resolve.cache_clear()


def _archive(path: Path) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        data = b"module gitea.com/gitea/runner\n"
        info = tarfile.TarInfo("gitea-runner-v1.0.8/go.mod")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def test_the_real_runner_is_pinned_by_version_and_checksum() -> None:
    comp = build.COMPONENTS["gitea-runner"]
    assert comp.binaries == {"gitea-runner": "."}
    assert build.module_version(comp) == "v1.0.8"
    assert comp.version_var == "gitea.com/gitea/runner/internal/pkg/ver.version"
    # The cache key needs no archive at hand, so a cached build is found without one.
    assert build.cache_key(comp).startswith("gitea-runner-v1.0.8-")


def test_an_archive_with_another_checksum_is_refused(
    clean: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRO_TESTBED_RUNNER_SRC", str(_archive(clean / "other.tar.gz")))
    with pytest.raises(RuntimeError, match="sha256"):
        build._extract_source(build.COMPONENTS["gitea-runner"], clean / "src")
    assert not (clean / "src").exists()


def test_a_missing_archive_is_an_error_not_a_fallback(
    clean: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRO_TESTBED_RUNNER_SRC", str(clean / "typo.tar.gz"))
    with pytest.raises(FileNotFoundError, match=r"typo\.tar\.gz"):
        runners.resolve()
    assert runners.planned().startswith("ERROR")


@pytest.mark.parametrize("knob", [("CI", "true"), ("GRO_REQUIRE_TESTBED", "1")])
def test_ci_refuses_the_stand_in(
    clean: Path, monkeypatch: pytest.MonkeyPatch, knob: tuple[str, str]
) -> None:
    monkeypatch.setenv(*knob)
    with pytest.raises(runners.StandInRefused, match="GRO_TESTBED_RUNNER_SRC"):
        runners.resolve()
    assert runners.planned().startswith("ERROR")


def test_without_the_archive_the_header_says_stand_in(clean: Path) -> None:
    assert runners.planned().startswith("STAND-IN gro-testbed-runner, NOT the real")
    assert "gitea-runner" not in build.default_components()


def test_with_the_archive_the_header_names_the_real_runner(
    clean: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRO_TESTBED_RUNNER_SRC", str(_archive(clean / "src.tar.gz")))
    assert runners.planned().startswith("gitea-runner v1.0.8 (built from ")
    assert "gitea-runner" in build.default_components()


def test_a_stand_in_describes_itself_loudly(tmp_path: Path) -> None:
    rb = runners.RunnerBinary(tmp_path / "gro-testbed-runner", "0.1", False, "fallback")
    assert rb.describe().startswith("STAND-IN gro-testbed-runner")
    real = runners.RunnerBinary(tmp_path / "gitea-runner", "v1.0.8", True, "cached build")
    assert real.describe().startswith("gitea-runner v1.0.8 (")


def test_ci_refuses_the_stand_in_given_as_the_runner_binary(
    clean: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = clean / "gro-testbed-runner"
    fake.write_text("#!/bin/sh\necho gro-testbed-runner-0.1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("GRO_TESTBED_RUNNER_BIN", str(fake))
    rb = runners.resolve()
    assert not rb.real and rb.version == "gro-testbed-runner-0.1"
    runners._resolve.cache_clear()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(runners.StandInRefused, match="stand-in"):
        runners.resolve()
