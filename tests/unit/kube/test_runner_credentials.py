"""A Forgejo runner's credentials Secret is written like every other write: a 429 (API
Priority and Fairness) pauses the write budget and is tried again, so a busy API server
does not cost a registration (which the enrolment would otherwise delete and redo)."""

from __future__ import annotations

from typing import Any

import pytest

from gitea_runner_operator.kube import http as http_module
from gitea_runner_operator.kube.http import Throttled
from gitea_runner_operator.kube.ratelimit import TokenBucket
from gitea_runner_operator.kube.runner_credentials import (
    RunnerCredentials,
    SecretExists,
    credentials_secret,
)
from tests.support.api_response import FakeResponse
from tests.support.clock import FakeTime


class FakeCore:
    """The Secrets API of a server that answers ``answers`` in turn, then 201."""

    def __init__(self, *answers: int) -> None:
        self.answers, self.created = list(answers), []  # type: list[int], list[Any]

    async def create_namespaced_secret(self, namespace: str, manifest: Any, **_: Any) -> Any:
        status = self.answers.pop(0) if self.answers else 201
        if status == 201:
            self.created.append(manifest)
            return FakeResponse(201)
        return FakeResponse(status, b'{"message": "no"}', {"Retry-After": "2"})


def _credentials(core: FakeCore) -> tuple[RunnerCredentials, FakeTime]:
    time_ = FakeTime()
    bucket = TokenBucket(qps=10, burst=5, clock=time_, sleep=time_.sleep)
    creds = RunnerCredentials(object(), limiter=bucket)  # type: ignore[arg-type]
    creds._core = core
    return creds, time_


def _manifest() -> dict[str, Any]:
    job = {"metadata": {"name": "runner-1", "uid": "u-1"}}
    return credentials_secret("team", job, {"token": "t"}, "group")


async def test_a_429_on_the_credentials_secret_is_waited_out_and_the_secret_is_created():
    # Before the fix create_secret called the API once, so the 429 came out as an error.
    core = FakeCore(429)
    creds, time_ = _credentials(core)
    await creds.create_secret(_manifest())
    assert [m["metadata"]["name"] for m in core.created] == ["runner-1"]
    assert time_.now >= 2.0  # the server's Retry-After


async def test_a_server_that_keeps_answering_429_gets_a_definite_no_and_nothing_is_created():
    core = FakeCore(*[429] * http_module.THROTTLE_ATTEMPTS)
    creds, _ = _credentials(core)
    with pytest.raises(Throttled):
        await creds.create_secret(_manifest())
    assert core.created == []


async def test_an_existing_secret_of_that_name_is_still_told_apart():
    creds, _ = _credentials(FakeCore(409))
    with pytest.raises(SecretExists):
        await creds.create_secret(_manifest())
