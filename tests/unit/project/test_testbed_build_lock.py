"""Parallel test workers (pytest-xdist) find an empty testbed cache at the same moment: each
component must still be compiled once, the others waiting for it and reusing it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.testbed import build


def test_two_workers_that_find_the_cache_empty_build_a_component_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GRO_TESTBED_CACHE", str(tmp_path))
    compiles: list[Path] = []

    def slow_compile(name: str, dest: Path) -> Path:
        compiles.append(dest)
        time.sleep(0.5)  # long enough for the other worker to reach the lock
        dest.mkdir(parents=True)
        (dest / "build.json").write_text("{}")
        return dest

    monkeypatch.setattr(build, "_build_component", slow_compile)
    results: list[Path] = []
    workers = [
        threading.Thread(target=lambda: results.append(build.build_component("etcd")))
        for _ in range(2)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join(10)

    assert len(compiles) == 1
    assert results == [build.component_dir("etcd")] * 2
    assert build.is_built("etcd")


def test_a_forced_build_compiles_again_even_when_cached(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GRO_TESTBED_CACHE", str(tmp_path))
    compiles: list[str] = []
    monkeypatch.setattr(build, "_build_component", lambda name, dest: compiles.append(name) or dest)
    dest = build.component_dir("kwok")
    dest.mkdir(parents=True)
    (dest / "build.json").write_text("{}")

    build.build_component("kwok")
    build.build_component("kwok", force=True)

    assert compiles == ["kwok"]
