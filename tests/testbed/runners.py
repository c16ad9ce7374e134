"""Which runner binary the e2e tests run: the real Gitea Runner, or (loudly) the stand-in.

Why a module of its own: the kubelet harness, the integration tests that register runners
by hand and the pytest report all need the same answer, and the answer must never change
silently. The real runner (``gitea-runner``, built from ``$GRO_TESTBED_RUNNER_SRC``) is the
default whenever it is built or can be built; the stand-in (``gro-testbed-runner``, written
for this testbed) is only a fallback for machines without the source archive. In CI
(``CI=true``) or with ``GRO_REQUIRE_TESTBED=1`` that fallback is an error: a suite that ran
the stand-in has not shown that the operator works with the real runner.

``$GRO_TESTBED_RUNNER_BIN`` names any other runner binary to run instead (e.g. a locally
built act_runner); it is used as given, and reported with what its ``--version`` says.
"""

from __future__ import annotations

import functools
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import build

STANDIN_WARNING = (
    "the e2e tests run the testbed's STAND-IN runner (gro-testbed-runner), NOT the real Gitea "
    "Runner: set GRO_TESTBED_RUNNER_SRC to the gitea-runner v1.0.8 source archive "
    "(../shared/vendor/gitea-runner/gitea-runner-v1.0.8-src.tar.gz) to run the real one. "
    "The stand-in does not cover: the real runner's label parsing, config file, cache server, "
    "log and state reporting cadence, SIGTERM/shutdown_timeout handling, exit codes and "
    "`uses:`/`if:`/matrix/container steps (see tests/testbed/README.md, 'Runner')."
)


class StandInRefused(RuntimeError):
    """The real runner is required (CI) but cannot be built here."""


@dataclass(frozen=True)
class RunnerBinary:
    """The resolved runner: where it is, what its ``--version`` says, and whether it is real."""

    path: Path
    version: str  # the last word of ``--version``, e.g. "v1.0.8"
    real: bool  # the real Gitea Runner (or an act_runner given by GRO_TESTBED_RUNNER_BIN)
    origin: str  # how it was chosen, for the report line

    def describe(self) -> str:
        """The report line's text, e.g. ``gitea-runner v1.0.8 (built from ...; /path)``."""
        if self.real:
            return f"{self.path.name} {self.version} ({self.origin}; {self.path})"
        return f"STAND-IN {self.path.name} {self.version} ({self.origin}; {self.path})"


def runner_required() -> bool:
    """CI or an explicit request: the stand-in fallback is a failure, not a substitution."""
    return (
        os.environ.get("CI", "").lower() == "true" or os.environ.get("GRO_REQUIRE_TESTBED") == "1"
    )


def binary_version(path: Path) -> str:
    """``<path> --version``, reduced to its last word (``gitea-runner version v1.0.8``)."""
    out = subprocess.run(
        [str(path), "--version"], capture_output=True, text=True, timeout=30, check=True
    ).stdout.strip()
    return out.split()[-1] if out else "unknown"


@functools.cache
def _resolve(bin_env: str, src_env: str, required: bool) -> RunnerBinary:
    if bin_env:
        path = Path(bin_env)
        version = binary_version(path)
        if "gro-testbed" in version and required:
            raise StandInRefused(f"GRO_TESTBED_RUNNER_BIN={path} is the stand-in runner")
        return RunnerBinary(path, version, "gro-testbed" not in version, "GRO_TESTBED_RUNNER_BIN")
    if build.real_runner_available():
        origin = "cached build" if build.is_built("gitea-runner") else "built now"
        if src_env:
            origin = f"{origin} of GRO_TESTBED_RUNNER_SRC={src_env}"
        build.build_component("gitea-runner")
        path = build.binary("gitea-runner")
        return RunnerBinary(path, binary_version(path), True, origin)
    if required:
        raise StandInRefused(
            "the real Gitea Runner is required (CI=true or GRO_REQUIRE_TESTBED=1) but is not "
            "built and GRO_TESTBED_RUNNER_SRC names no source archive (or `go` is missing); "
            "the stand-in runner is only a fallback for machines without the archive"
        )
    if not build.is_built("runner"):
        build.build_component("runner")
    path = build.binary("gro-testbed-runner")
    return RunnerBinary(path, binary_version(path), False, "fallback: no runner source archive")


_USED: list[RunnerBinary] = []


def resolve() -> RunnerBinary:
    """The runner the tests run (built first when needed); raises :class:`StandInRefused`
    when only the stand-in is at hand and the real runner is required."""
    rb = _resolve(
        os.environ.get("GRO_TESTBED_RUNNER_BIN", ""),
        os.environ.get("GRO_TESTBED_RUNNER_SRC", ""),
        runner_required(),
    )
    if rb not in _USED:
        _USED.append(rb)
    return rb


def used() -> list[RunnerBinary]:
    """Every runner :func:`resolve` handed out in this process (for the final report)."""
    return list(_USED)


def planned() -> str:
    """The report header's line, without building anything (the header comes first)."""
    if os.environ.get("GRO_TESTBED_RUNNER_BIN"):
        return f"{os.environ['GRO_TESTBED_RUNNER_BIN']} (GRO_TESTBED_RUNNER_BIN)"
    comp = build.COMPONENTS["gitea-runner"]
    if build.is_built("gitea-runner"):
        return f"gitea-runner {comp.source_version} (cached build, {build.binary('gitea-runner')})"
    try:
        archive = build.runner_archive()
    except FileNotFoundError as e:
        return f"ERROR: {e}"
    if archive is not None:
        return f"gitea-runner {comp.source_version} (built from {archive} when first needed)"
    if runner_required():
        return "ERROR: no real runner (set GRO_TESTBED_RUNNER_SRC); e2e tests will fail"
    return "STAND-IN gro-testbed-runner, NOT the real Gitea Runner (GRO_TESTBED_RUNNER_SRC unset)"
