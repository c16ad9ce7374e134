"""Which runner binary the e2e tests run, decided once and named in every report.

Why a module of its own: the kubelet harness, the real node's images, the integration tests
that register runners by hand and the pytest report all need the same answer, and a reader
of any CI log must see which runner ran. By default it is the testbed's own runner
(``gro-testbed-runner``, built from ``go/runner``: a command line and reporting loop written
here over the official workflow engine ``gitea.com/gitea/act`` and protocol
``code.gitea.io/actions-proto-go``); it is not the official Gitea Runner and says so in its
``--version``. ``$GRO_TESTBED_RUNNER_BIN`` runs any other runner binary in its place, an
official ``gitea-runner`` of any version for instance, and the report names it.

Runner releases behave differently where the operator cares (see the README's "Runner
versions"). :class:`Behaviour` holds those recorded differences in one place, so the contract
tests assert each runner against the behaviour of the release it is, or follows.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import build

TESTBED_MARK = "gro-testbed-runner"
# The official release whose recorded behaviour the testbed runner follows.
TESTBED_FOLLOWS = (1, 0, 8)


@dataclass(frozen=True)
class Behaviour:
    """What a runner release does where releases differ (recorded against real Gitea)."""

    release: tuple[int, int, int]

    @property
    def refuses_unknown_schema(self) -> bool:
        """``app:infra`` makes ``register`` exit 1 (v1.x); from v2.1 it becomes a host label."""
        return self.release < (2, 1, 0)

    @property
    def busy_step_outlives_sigterm(self) -> bool:
        """v1.0.8 lets a running step finish after SIGTERM even with ``shutdown_timeout: 0s``
        (only the Pod's grace period bounds it); v3.1.0 no longer does. Releases between are
        unrecorded, so only 1.x is held to it."""
        return self.release < (2, 0, 0)


@dataclass(frozen=True)
class RunnerBinary:
    """The resolved runner: where it is, what its ``--version`` says, how it was chosen."""

    path: Path
    version_line: str  # the first line of ``--version``
    origin: str  # how it was chosen, for the report line

    @property
    def official(self) -> bool:
        """Not the testbed's runner (an official ``gitea-runner``, or another given binary)."""
        return TESTBED_MARK not in self.version_line

    @property
    def behaviour(self) -> Behaviour:
        """The recorded behaviour to expect: the testbed runner follows v1.0.8; another binary
        is taken at the version it reports (``gitea-runner version v3.1.0``)."""
        if not self.official:
            return Behaviour(TESTBED_FOLLOWS)
        m = re.search(r"v?(\d+)\.(\d+)\.(\d+)", self.version_line)
        return Behaviour(tuple(int(g) for g in m.groups()) if m else (0, 0, 0))  # type: ignore[arg-type]

    def describe(self) -> str:
        """The report line's text, e.g. ``gro-testbed-runner 0.2 (...) (cached build; /path)``."""
        return f"{self.version_line} ({self.origin}; {self.path})"


def version_line(path: Path) -> str:
    """The first line ``<path> --version`` prints."""
    out = subprocess.run(
        [str(path), "--version"], capture_output=True, text=True, timeout=30, check=True
    ).stdout.strip()
    return out.splitlines()[0] if out else "unknown"


@functools.cache
def _resolve(bin_env: str) -> RunnerBinary:
    if bin_env:
        path = Path(bin_env).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"GRO_TESTBED_RUNNER_BIN={bin_env}: no such file")
        return RunnerBinary(path, version_line(path), "GRO_TESTBED_RUNNER_BIN")
    origin = "cached build" if build.is_built("runner") else "built now"
    build.build_component("runner")
    path = build.binary("gro-testbed-runner")
    return RunnerBinary(path, version_line(path), origin)


_USED: list[RunnerBinary] = []


def resolve() -> RunnerBinary:
    """The runner the tests run, built first when needed."""
    rb = _resolve(os.environ.get("GRO_TESTBED_RUNNER_BIN", ""))
    if rb not in _USED:
        _USED.append(rb)
    return rb


def used() -> list[RunnerBinary]:
    """Every runner :func:`resolve` handed out in this process (for the final report)."""
    return list(_USED)


def planned() -> str:
    """The report header's line, without building anything (the header comes first)."""
    given = os.environ.get("GRO_TESTBED_RUNNER_BIN")
    if given:
        return f"{given} (GRO_TESTBED_RUNNER_BIN)"
    if build.is_built("runner"):
        return f"{version_line(build.binary('gro-testbed-runner'))} (cached build)"
    return (
        f"{TESTBED_MARK} (built from tests/testbed/go/runner when first needed), "
        "not the official Gitea Runner"
    )
