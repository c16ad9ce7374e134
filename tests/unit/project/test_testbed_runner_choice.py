"""Choosing the runner the e2e tests run: the testbed's runner, built from this repository on
the official engine, or any binary ``GRO_TESTBED_RUNNER_BIN`` names; and holding each to the
recorded behaviour of the release it is, or follows. Nothing may build, copy or name the
official runner's source: it reached the project outside the package registries once, and
must not again."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import REPO_ROOT
from tests.testbed import build, images, runners

REPO = REPO_ROOT


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """An empty binary cache and no runner knobs set."""
    monkeypatch.delenv("GRO_TESTBED_RUNNER_BIN", raising=False)
    monkeypatch.setenv("GRO_TESTBED_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(runners, "_USED", [])  # keep this session's runner report clean
    runners._resolve.cache_clear()
    yield tmp_path
    runners._resolve.cache_clear()


def _binary(path: Path, version: str) -> Path:
    path.write_text(f"#!/bin/sh\necho '{version}'\n")
    path.chmod(0o755)
    return path


def test_the_testbed_runner_is_pinned_to_the_official_engine_from_the_module_proxy() -> None:
    comp = build.COMPONENTS["runner"]
    assert comp.module == "gitea.com/gitea/act"
    assert build.module_version(comp).startswith("v0.261.")
    gomod = (comp.wrapper / "go.mod").read_text()
    # act's own go.mod names it github.com/nektos/act; the wrapper takes gitea's fork by name
    assert re.search(r"github.com/nektos/act\s+=>\s+gitea.com/gitea/act v0\.261\.", gomod)
    assert "code.gitea.io/actions-proto-go" in gomod
    # it answers to the name the images and the operator's scripts look for
    assert ("gitea-runner", "gro-testbed-runner") in comp.aliases


def test_nothing_builds_or_names_the_official_runner_source() -> None:
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    me = Path(__file__).relative_to(REPO).as_posix()
    needles = ("GRO_TESTBED_RUNNER_SRC", "shared/vendor", "gitea-runner-v1.0.8-src")
    offenders = []
    for name in tracked:
        if name == me:
            continue
        path = REPO / name
        if not path.is_file() or path.stat().st_size > 2**20:
            continue
        text = path.read_text(errors="replace")
        offenders += [f"{name}: {n}" for n in needles if n in text]
    assert offenders == []
    assert "gitea-runner" not in build.COMPONENTS


def test_by_default_the_header_names_the_testbed_runner_and_says_it_is_not_official(
    clean: Path,
) -> None:
    line = runners.planned()
    assert line.startswith("gro-testbed-runner") and "not the official Gitea Runner" in line


def test_a_given_binary_runs_in_its_place_and_the_report_names_it(
    clean: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exe = _binary(clean / "gitea-runner", "gitea-runner version v3.1.0")
    monkeypatch.setenv("GRO_TESTBED_RUNNER_BIN", str(exe))
    rb = runners.resolve()
    assert rb.path == exe and rb.official
    assert rb.describe().startswith("gitea-runner version v3.1.0 (GRO_TESTBED_RUNNER_BIN; ")
    assert runners.planned() == f"{exe} (GRO_TESTBED_RUNNER_BIN)"
    assert runners.used() == [rb]


def test_a_given_binary_that_is_missing_is_an_error_not_a_fallback(
    clean: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRO_TESTBED_RUNNER_BIN", str(clean / "typo"))
    with pytest.raises(FileNotFoundError, match="typo"):
        runners.resolve()


@pytest.mark.parametrize(
    ("version", "refuses_unknown_schema", "busy_step_outlives_sigterm"),
    [
        ("gro-testbed-runner 0.2 (gitea.com/gitea/act v0.261.10), not the official", True, True),
        ("gitea-runner version v1.0.8", True, True),
        ("gitea-runner version v2.1.0", False, False),
        ("gitea-runner version v3.1.0", False, False),
    ],
)
def test_each_runner_is_held_to_its_releases_recorded_behaviour(
    tmp_path: Path, version: str, refuses_unknown_schema: bool, busy_step_outlives_sigterm: bool
) -> None:
    behaviour = runners.RunnerBinary(tmp_path / "x", version, "test").behaviour
    assert behaviour.refuses_unknown_schema is refuses_unknown_schema
    assert behaviour.busy_step_outlives_sigterm is busy_step_outlives_sigterm


def _entrypoint(tmp_path: Path, env: dict[str, str], register_says: str) -> list[str]:
    """Run the images' entrypoint with a fake ``gitea-runner`` that records its calls."""
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "gitea-runner"
    fake.parent.mkdir()
    fake.write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\n'
        f'[ "$1" = register ] && {{ echo "{register_says}"; : > .runner-made; }}\nexit 0\n'
    )
    fake.chmod(0o755)
    script = tmp_path / "entrypoint.sh"
    script.write_text(images.RUNNER_ENTRYPOINT)
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    run_env = {"PATH": f"{fake.parent}:/usr/bin:/bin", "GITEA_MAX_REG_ATTEMPTS": "1", **env}
    proc = subprocess.run(
        ["bash", str(script)], cwd=data, env=run_env, capture_output=True, text=True, timeout=30
    )
    lines = calls.read_text().splitlines() if calls.exists() else []
    return [f"exit {proc.returncode}", *lines]


ENV = {
    "GITEA_INSTANCE_URL": "http://gitea:3000",
    "GITEA_RUNNER_REGISTRATION_TOKEN": "tok",
    "GITEA_RUNNER_NAME": "r1",
    "GITEA_RUNNER_LABELS": "ubuntu:host,linux",
    "GITEA_RUNNER_EPHEMERAL": "false",  # any non-empty value turns it on, as documented
    "CONFIG_FILE": "/etc/runner/config.yaml",
}


def test_the_images_entrypoint_registers_once_then_runs_the_daemon(tmp_path: Path) -> None:
    calls = _entrypoint(tmp_path, ENV, "Runner registered successfully.")
    assert calls == [
        "exit 0",
        "register --no-interactive --instance http://gitea:3000 --token tok --name r1 "
        "--config /etc/runner/config.yaml --ephemeral --labels ubuntu:host,linux",
        "daemon --config /etc/runner/config.yaml",
    ]


def test_the_entrypoint_skips_registration_when_the_state_file_exists(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / ".runner").write_text("{}")
    env = {k: v for k, v in ENV.items() if "TOKEN" not in k} | {"GITEA_RUNNER_ONCE": "1"}
    calls = _entrypoint(tmp_path, env, "unused")
    assert calls == ["exit 0", "daemon --config /etc/runner/config.yaml --once"]


def test_the_entrypoint_judges_registration_by_its_line_not_its_exit_code(
    tmp_path: Path,
) -> None:
    calls = _entrypoint(tmp_path, ENV, "level=error msg=unauthenticated")
    assert calls[0] == "exit 1" and not any(c.startswith("daemon") for c in calls)
