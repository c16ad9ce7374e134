"""One version everywhere a user reads it: ``--version``, the package, the image, the chart
and the install manifests; and an image base pinned by version, not a floating tag."""

from __future__ import annotations

import re
import tomllib

import pytest
import yaml

from gitea_runner_operator import __version__
from gitea_runner_operator.cli import main
from tests.support import REPO_ROOT

REPO = REPO_ROOT


def test_version_flag_prints_the_version_and_exits_0(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"gitea-runner-operator {__version__}"


def test_the_version_is_the_same_in_package_image_chart_and_manifests():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["version"] == __version__
    chart = yaml.safe_load((REPO / "charts/gitea-runner-operator/Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
    deployment = yaml.safe_load((REPO / "manifests/deployment.yaml").read_text())
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"gitea-runner-operator:{__version__}"
    containerfile = (REPO / "Containerfile").read_text()
    assert f'org.opencontainers.image.version="{__version__}"' in containerfile
    assert f"gitea-runner-operator:{__version__}" in containerfile


def test_the_image_base_is_pinned_by_a_full_version():
    text = (REPO / "Containerfile").read_text()
    (base,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.M)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", base), base
    froms = re.findall(r"^FROM (\S+)", text, re.M)
    assert froms and all(f == "${PYTHON_IMAGE}" for f in froms), froms
