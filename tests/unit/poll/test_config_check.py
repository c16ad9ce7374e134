"""A runner config that the real runner (gitea/runner v1.0.8) would let override the group, or
refuse to start with, is refused with a condition instead of starting runners that never take
a job. (tests/e2e/test_runner_contract.py shows the real runner's side.)"""

from __future__ import annotations

from typing import Any

import pytest
from aioresponses import aioresponses

from gitea_runner_operator.api.runner_config import runner_config_problem
from gitea_runner_operator.api.runnergroup import RunnerMode, parse_spec
from gitea_runner_operator.forge.client import SessionPool
from gitea_runner_operator.kube.configmaps import ReferenceProblem
from gitea_runner_operator.poll.config_check import RunnerConfigCheck
from gitea_runner_operator.poll.observer import Observer
from tests.support.gitea_answers import ORG_SPEC, FakeSecrets, gitea


@pytest.mark.parametrize(
    "text",
    [
        "",
        "runner:\n  capacity: 1\n  shutdown_timeout: 5m\ncontainer:\n  network: host\n",
        "runner:\n  labels: []\n",
        "runner:\n  file: .runner\n",
        "cache:\n  enabled: false\n  external_server: http://cache/\n",
        "cache:\n  external_server: http://cache/\n  external_secret: s\n",
    ],
)
def test_a_config_that_leaves_the_operators_parts_alone_passes(text: str) -> None:
    for mode in RunnerMode:
        assert runner_config_problem(text, mode) is None


@pytest.mark.parametrize(
    ("text", "mode", "fragment"),
    [
        ("runner:\n  labels: [ubuntu:host]\n", RunnerMode.DIND, "sets runner.labels"),
        ("runner:\n  labels: [ubuntu:host]\n", RunnerMode.HOST, "sets runner.labels"),
        ("runner:\n  file: state.json\n", RunnerMode.HOST, "runner.file"),
        ("cache:\n  external_server: http://cache/\n", RunnerMode.DIND, "external_secret"),
        ("runner: [\n", RunnerMode.DIND, "does not parse as YAML"),
        ("- a\n- b\n", RunnerMode.DIND, "not a YAML mapping"),
        ("runner: 3\n", RunnerMode.DIND, "must be mappings"),
    ],
)
def test_a_config_the_runner_would_misuse_or_refuse_is_refused(
    text: str, mode: RunnerMode, fragment: str
) -> None:
    problem = runner_config_problem(text, mode)
    assert problem is not None and fragment in problem


def test_another_state_file_is_fine_outside_host_mode() -> None:
    # The image's own entrypoint registers there and then; only host mode's init container
    # depends on the default name.
    assert runner_config_problem("runner:\n  file: state.json\n", RunnerMode.DIND) is None


class FakeConfigs:
    def __init__(self, text: str) -> None:
        self.text = text
        self.reads: list[tuple[str, str, str]] = []

    async def read_config_map_key(self, namespace: str, name: str, key: str, **_: Any) -> str:
        self.reads.append((namespace, name, key))
        return self.text


async def _observe(text: str) -> Any:
    spec = parse_spec(
        {**ORG_SPEC, "runnerConfig": {"configMapKeyRef": {"name": "rc", "key": "config.yaml"}}}
    )
    configs = FakeConfigs(text)
    pool = SessionPool()
    try:
        observer = Observer(
            FakeSecrets({"ns": "t"}),  # type: ignore[arg-type]
            pool,
            configs=configs,  # type: ignore[arg-type]
        )
        with aioresponses() as mock:
            gitea(mock)
            snapshot, _ = await observer.observe("ns", spec)
    finally:
        await pool.close()
    assert configs.reads == [("ns", "rc", "config.yaml")]
    return snapshot


async def test_the_group_reports_a_runner_config_that_sets_labels() -> None:
    snapshot = await _observe("runner:\n  labels: ['ubuntu:host']\n")
    assert snapshot.observation is None
    assert snapshot.problem.reason == "RunnerConfigInvalid"
    assert "ConfigMap ns/rc" in snapshot.problem.message
    assert "sets runner.labels" in snapshot.problem.message


async def test_a_good_runner_config_does_not_stand_in_the_way() -> None:
    snapshot = await _observe("runner:\n  capacity: 1\n")
    assert snapshot.problem is None and snapshot.observation is not None


async def test_a_new_config_is_parsed_beside_the_event_loop_once_for_every_group_using_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 64 KiB config costs up to ~300 ms of parsing (a flow list of 30,000 items): the
    first check of it runs in a thread of its own, so the loop (probes, Lease, other
    groups) is not held; groups checking the same new config meanwhile share that parse,
    and later checks answer from memory. The parse here waits for the loop to run a
    callback: on the loop it could not, and would fail."""
    import asyncio
    import threading

    from gitea_runner_operator.api import runner_config

    loop_thread = threading.get_ident()
    loop = asyncio.get_running_loop()
    parsed_in: list[int] = []
    real = runner_config.parse_problem

    def parse(text: str, key: Any) -> str | None:
        parsed_in.append(threading.get_ident())
        reached = threading.Event()
        loop.call_soon_threadsafe(reached.set)
        assert reached.wait(10), "the event loop did not run while the config was parsed"
        return real(text, key)

    monkeypatch.setattr("gitea_runner_operator.poll.config_check.parse_problem", parse)
    text = "runner:\n  labels: [" + ",".join(f"l{i}" for i in range(3000)) + "]\n"
    spec = parse_spec(
        {**ORG_SPEC, "runnerConfig": {"configMapKeyRef": {"name": "rc", "key": "config.yaml"}}}
    )
    checker = RunnerConfigCheck(FakeConfigs(text))  # type: ignore[arg-type]

    async def check() -> str:
        try:
            await checker.require_usable("ns", spec)
        except ReferenceProblem as exc:
            return exc.problem.reason
        return "passed"

    first = await asyncio.gather(*(check() for _ in range(5)))
    again = await check()
    assert [*first, again] == ["RunnerConfigInvalid"] * 6
    assert len(parsed_in) == 1 and parsed_in[0] != loop_thread
