"""ConfigReader keeps the values of the ConfigMap keys that are used, within a byte bound,
never whole ConfigMaps: a tenant's large ConfigMap costs the operator the key it names."""

from __future__ import annotations

import base64
from types import SimpleNamespace
from typing import Any

import pytest

from gitea_runner_operator.kube.configmaps import ConfigReader, ReferenceProblem
from gitea_runner_operator.kube.secret_store import SecretStore
from tests.support.fake_cluster import FakeCore


def config_map(data: dict[str, str], binary: dict[str, bytes] | None = None) -> Any:
    encoded = {k: base64.b64encode(v).decode() for k, v in (binary or {}).items()}
    return SimpleNamespace(data=data, binary_data=encoded or None)


def reader_over(objects: dict[str, Any], **kw: Any) -> tuple[ConfigReader, FakeCore]:
    core = FakeCore({("ConfigMap", name): obj for name, obj in objects.items()})
    reader = ConfigReader(None, SecretStore(None), **kw)
    reader._core = core
    return reader, core


async def read(reader: ConfigReader, name: str, key: str) -> str:
    return await reader.read_config_map_key(
        "team-a", name, key, field="spec.runnerConfig.configMapKeyRef", reason_prefix="RunnerConfig"
    )


async def test_only_the_keys_in_use_are_kept():
    big = {f"other{i}": "x" * 100_000 for i in range(10)}  # 1 MB the group never names
    reader, core = reader_over({"cfg": config_map({"config.yaml": "runner: {}\n", **big})})
    for _ in range(10):
        assert await read(reader, "cfg", "config.yaml") == "runner: {}\n"
    assert core.reads == 1
    assert reader.bytes < 1024
    assert "x" * 1000 not in repr(reader._cache)
    # another key: read once more, then both kept
    assert await read(reader, "cfg", "other3") == "x" * 100_000
    assert await read(reader, "cfg", "config.yaml") == "runner: {}\n"
    assert core.reads == 2
    assert 100_000 < reader.bytes < 101_024


async def test_missing_and_binary_keys_answer_as_before():
    reader, _ = reader_over({"cfg": config_map({}, {"bin": b"text", "bad": b"\xff\xfe"})})
    assert await read(reader, "cfg", "bin") == "text"
    with pytest.raises(ReferenceProblem) as missing:
        await read(reader, "cfg", "nope")
    assert missing.value.problem.reason == "RunnerConfigNotFound"
    assert "ConfigMap team-a/cfg has no key 'nope'" in missing.value.problem.message
    with pytest.raises(ReferenceProblem) as bad:
        await read(reader, "cfg", "bad")
    assert bad.value.problem.reason == "RunnerConfigInvalid"
    assert "key 'bad' of ConfigMap team-a/cfg is not UTF-8 text" in bad.value.problem.message


async def test_the_kept_values_are_bounded_in_bytes():
    objects = {f"c{i}": config_map({"k": "v" * 4000}) for i in range(100)}
    objects["huge"] = config_map({"k": "h" * 100_000})
    reader, _ = reader_over(objects, max_bytes=64 * 1024)
    for i in range(100):
        await read(reader, f"c{i}", "k")
    assert reader.bytes <= 64 * 1024 and 10 < len(reader._cache) < 16
    assert await read(reader, "huge", "k") == "h" * 100_000  # answered, not kept
    assert ("team-a", "huge") not in reader._cache and reader.bytes <= 64 * 1024
