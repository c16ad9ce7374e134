"""Whether a namespace is being deleted whole: only a clear answer says yes (poll/last_good.py
reuses a token nobody can read any more only then)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.kube.namespaces import CACHE_TTL, NamespaceReader
from tests.support.fake_cluster import Clock


class Core:
    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.reads: list[str] = []

    async def read_namespace(self, name: str, **_: Any) -> Any:
        self.reads.append(name)
        await asyncio.sleep(0)
        answer = self.answers[name]
        if isinstance(answer, BaseException):
            raise answer
        return answer


def _ns(deleted: bool, phase: str = "Active") -> Any:
    meta = SimpleNamespace(deletion_timestamp="2026-11-29T00:00:00Z" if deleted else None)
    return SimpleNamespace(metadata=meta, status=SimpleNamespace(phase=phase))


@pytest.mark.parametrize(
    ("answer", "deleting"),
    [
        (_ns(False), False),
        (_ns(True, "Terminating"), True),
        (_ns(False, "Terminating"), True),
        (ApiException(status=404), True),  # gone already
        (ApiException(status=403), False),  # not allowed to look: never a guess
        (TimeoutError(), False),
    ],
)
async def test_only_a_clear_answer_says_a_namespace_is_being_deleted(answer, deleting):
    reader = NamespaceReader(None)
    reader._core = Core({"team-a": answer})
    assert await reader.deleting("team-a") is deleting


async def test_readers_share_one_read_and_the_answer_is_kept_briefly():
    clock = Clock()
    reader = NamespaceReader(None, clock=clock)
    core = Core({"team-a": _ns(True)})
    reader._core = core
    assert await asyncio.gather(*(reader.deleting("team-a") for _ in range(10))) == [True] * 10
    assert await reader.deleting("team-a") is True
    assert core.reads == ["team-a"]
    clock.now += CACHE_TTL + 1
    core.answers["team-a"] = _ns(False)
    assert await reader.deleting("team-a") is False
    assert len(core.reads) == 2
