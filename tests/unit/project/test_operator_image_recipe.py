"""The image the real-node suite builds (tests/testbed/operator_image.py) must be the image
Containerfile publishes in every way a user or a Pod can tell: the Python minor version,
the user, the entrypoint, the environment and the exposed ports. When one recipe changes and
the other does not, this fails and names the difference."""

from __future__ import annotations

import json
import re

from gitea_runner_operator import __version__
from tests.support import REPO_ROOT
from tests.testbed import operator_image

CONTAINERFILE = REPO_ROOT / "Containerfile"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the final stage, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", CONTAINERFILE.read_text())
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    parsed = [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1]) for ln in lines]
    last_from = max(i for i, (op, _) in enumerate(parsed) if op == "FROM")
    return [*(p for p in parsed if p[0] == "ARG"), *parsed[last_from:]]


def _one(op: str) -> str:
    (value,) = [args for name, args in _instructions() if name == op]
    return value


def test_python_minor_version_and_debian_release_match_the_containerfile_base():
    base = _one("ARG").split("=", 1)[1]
    match = re.fullmatch(r"python:(\d+)\.(\d+)\.\d+-slim-(\w+)", base)
    assert match, base
    assert (int(match[1]), int(match[2])) == operator_image.PYTHON_MINOR
    # Debian bookworm's python3 is 3.11: the testbed's base is the Containerfile's release.
    assert match[3] == "bookworm"
    assert (
        "usr/local/lib/python{}.{}/dist-packages".format(*match.groups()[:2]) == operator_image.SITE
    )


def test_user_entrypoint_environment_and_ports_match():
    assert _one("USER") == operator_image.USER
    assert json.loads(_one("ENTRYPOINT")) == operator_image.ENTRYPOINT
    env = dict(pair.split("=", 1) for pair in _one("ENV").split())
    assert env == operator_image.ENV
    assert tuple(int(p) for p in _one("EXPOSE").split()) == operator_image.EXPOSED_PORTS


def test_the_tag_is_the_package_version_under_the_charts_default_name():
    label = re.search(r'org\.opencontainers\.image\.version="([^"]+)"', _one("LABEL"))
    assert label and label[1] == __version__
    assert f"gitea-runner-operator:{__version__}" == operator_image.REF
    values = (CONTAINERFILE.parent / "charts/gitea-runner-operator/values.yaml").read_text()
    assert re.search(r"^  repository: gitea-runner-operator$", values, re.M)
    assert operator_image.KUBELET_NAME == "docker.io/library/gitea-runner-operator"


def test_the_entry_script_runs_what_the_console_script_names():
    pyproject = (CONTAINERFILE.parent / "pyproject.toml").read_text()
    assert 'gitea-runner-operator = "gitea_runner_operator.cli:main"' in pyproject
    assert "from gitea_runner_operator.cli import main" in operator_image.ENTRY_SCRIPT
