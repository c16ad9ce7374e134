"""``spec.runnerConfig`` is read on every poll: its size is capped, it is parsed by the C
loader, its verdict is remembered by content hash, and a deeply nested one is a clear
refusal, not a RecursionError traceback per poll (issue 36, row 6)."""

from __future__ import annotations

import time

import pytest
import yaml

from gitea_runner_operator.api import caps, runner_config
from gitea_runner_operator.api.cache import RunnerConfigConflict, merge_runner_config
from gitea_runner_operator.api.runner_config import runner_config_problem
from gitea_runner_operator.api.runnergroup import RunnerMode


@pytest.fixture(autouse=True)
def fresh_verdicts():
    runner_config.VERDICTS.clear()


def test_a_config_past_the_size_cap_is_refused_naming_the_cap():
    text = "runner:\n  capacity: 1\n" + "# padding\n" * (caps.RUNNER_CONFIG_MAX_BYTES // 10)
    assert runner_config_problem(text, RunnerMode.DIND) == (
        f"is {len(text)} bytes, more than the {caps.RUNNER_CONFIG_MAX_BYTES} bytes allowed"
    )


@pytest.mark.parametrize(
    "text",
    [
        "a: " + "[" * 100_000 + "]" * 100_000 + "\n",
        "".join(f"{'  ' * i}k{i}:\n" for i in range(1_000)),
    ],
    ids=["flow", "block"],
)
def test_a_config_nested_past_the_cap_is_a_clear_refusal(text):
    text = text[: caps.RUNNER_CONFIG_MAX_BYTES]
    problem = runner_config_problem(text, RunnerMode.DIND)
    assert problem == f"nests deeper than {caps.RUNNER_CONFIG_MAX_DEPTH} levels"


def test_an_unchanged_config_is_parsed_once(monkeypatch):
    loaders = []
    real = yaml.load

    def spy(stream, Loader):  # noqa: N803 - yaml's own name
        loaders.append(Loader)
        return real(stream, Loader=Loader)

    monkeypatch.setattr(runner_config.yaml, "load", spy)
    text = "".join(f"k{i}: [a, b, {{c: d}}]\n" for i in range(2_000))
    for _ in range(10):
        assert runner_config_problem(text, RunnerMode.DIND) is None
    assert len(loaders) == 1
    assert loaders[0] is getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def test_the_verdicts_kept_are_bounded():
    for i in range(caps.RUNNER_CONFIG_VERDICTS + 50):
        runner_config_problem(f"runner:\n  capacity: {i}\n", RunnerMode.DIND)
    assert len(runner_config.VERDICTS) == caps.RUNNER_CONFIG_VERDICTS


def test_a_config_at_the_cap_is_checked_within_a_generous_time():
    # a guard against a hang, not a performance claim
    text = "".join(f"k{i}: v\n" for i in range(caps.RUNNER_CONFIG_MAX_BYTES // 12))
    started = time.process_time()
    assert runner_config_problem(text, RunnerMode.DIND) is None
    assert time.process_time() - started < 5.0


def test_the_cache_merge_refuses_a_deep_config_too():
    deep = "a: " + "[" * 10_000 + "]" * 10_000 + "\n"
    with pytest.raises(RunnerConfigConflict, match="nests deeper than"):
        merge_runner_config(deep, server_url="http://c/", secret="s", offline_mode=None)
