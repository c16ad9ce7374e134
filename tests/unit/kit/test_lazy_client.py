"""The operator imports the Kubernetes client's APIs and models it uses, not all 946 modules
of the generated package: about 30 MB of RSS per replica (docs/benchmarks.md, Memory)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gitea_runner_operator.kit.lazyimport import make_lazy

ROOT = Path(__file__).resolve().parents[2]


def run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return done.stdout.strip()


def test_starting_the_operator_imports_a_few_kubernetes_client_modules_not_all():
    count = run(
        "import sys, gitea_runner_operator.cli\n"
        "print(sum(m.startswith('kubernetes_asyncio.client.') for m in sys.modules))"
    )
    assert int(count) < 100  # 946 before


def test_importing_the_package_changes_nothing_in_the_process():
    """Only the entry point bounds memory: a program that imports a module of the operator
    (or the package itself) keeps its own asyncio TLS buffer and its eager client."""
    untouched = run(
        "import asyncio.sslproto, sys, gitea_runner_operator, gitea_runner_operator.api.naming\n"
        "print(asyncio.sslproto.SSLProtocol.max_size,"
        " 'kubernetes_asyncio.client' in sys.modules)"
    )
    assert untouched == "262144 False"
    bounded = run(
        "import asyncio.sslproto, sys, gitea_runner_operator.cli\n"
        "print(asyncio.sslproto.SSLProtocol.max_size,"
        " type(sys.modules['kubernetes_asyncio.client']).__name__)"
    )
    assert bounded == "32768 LazyPackage"


def test_the_lazy_client_serves_the_same_classes_and_deserializes_models():
    out = run(
        "import asyncio, json, gitea_runner_operator\n"
        "from kubernetes_asyncio import client\n"
        "from kubernetes_asyncio.client.api.core_v1_api import CoreV1Api\n"
        "assert client.CoreV1Api is CoreV1Api\n"
        "class Answer:\n"
        "    data = json.dumps({'metadata': {'name': 'p', 'labels': {'a': 'b'}}})\n"
        "async def main():\n"
        "    async with client.ApiClient() as api:\n"
        "        pod = api.deserialize(Answer(), 'V1Pod')\n"
        "        print(type(pod).__name__, pod.metadata.name, pod.metadata.labels['a'])\n"
        "asyncio.run(main())\n"
        "try:\n"
        "    client.NoSuchThing\n"
        "except AttributeError:\n"
        "    print('AttributeError')\n"
    )
    assert out.splitlines() == ["V1Pod p b", "AttributeError"]


def test_a_package_whose_init_does_more_than_reexport_is_left_alone(tmp_path, monkeypatch):
    for name, init in (
        ("reexports", "from reexports.part import Thing\n__all__ = ['Thing']\n"),
        ("busy", "from busy.part import Thing\nSIDE_EFFECT = print('imported')\n"),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(init)
        (tmp_path / name / "part.py").write_text("class Thing:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert make_lazy("reexports") is True
        assert "reexports.part" not in sys.modules
        assert sys.modules["reexports"].Thing.__module__ == "reexports.part"
        assert make_lazy("busy") is False
        assert "busy" not in sys.modules
    finally:
        for name in ("reexports", "reexports.part", "busy"):
            sys.modules.pop(name, None)
