"""What comes back from a tenant-chosen URL is untrusted input: bounded in size and depth,
and never echoed into status. Mocked with aioresponses because the real Gitea cannot be made
to answer 200 MiB, nest 100,000 levels or answer 418; the fault suite has a loopback server
for the size (``tests/faults/test_bounded_faults.py``)."""

from __future__ import annotations

import re

import aiohttp
import pytest
from aioresponses import aioresponses

from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.forge.client import GiteaClient
from gitea_runner_operator.forge.errors import (
    GiteaAnswerTooLarge,
    GiteaError,
    GiteaProtocolError,
    GiteaServerError,
)
from gitea_runner_operator.forge.scope import ScopeRef

BASE = "http://gitea.test"
REPO = ScopeRef(Scope.REPO, "acme", "widgets")
JOBS = re.compile(r"^http://gitea\.test/api/v1/repos/acme/widgets/actions/jobs\?.*$")


@pytest.fixture
async def client():
    async def no_sleep(seconds: float) -> None:
        return None

    session = aiohttp.ClientSession()
    yield GiteaClient(session, BASE, "tok", max_body=1024, sleep=no_sleep, attempts=2)
    await session.close()


async def test_a_body_past_the_cap_is_refused_with_its_own_reason(client):
    with aioresponses() as mock:
        mock.get(JOBS, status=200, body=b"[" + b"0," * 4000 + b"0]")
        with pytest.raises(GiteaAnswerTooLarge) as err:
            await client.list_jobs(REPO)
        assert len(mock.requests) == 1  # never retried
    assert err.value.reason == "GiteaAnswerTooLarge"
    assert "MiB" in str(err.value) or "larger" in str(err.value)


@pytest.mark.parametrize("depth", [40, 100_000])
async def test_deeply_nested_json_is_a_bad_response_never_a_traceback(client, depth):
    session = aiohttp.ClientSession()
    big = GiteaClient(session, BASE, "tok", attempts=1)  # default 16 MiB cap
    try:
        with aioresponses() as mock:
            mock.get(JOBS, status=200, body=b"[" * depth + b"]" * depth)
            with pytest.raises(GiteaProtocolError) as err:
                await big.list_jobs(REPO)
    finally:
        await session.close()
    assert err.value.reason == "GiteaBadResponse"


async def test_malformed_json_is_a_bad_response(client):
    with aioresponses() as mock:
        mock.get(JOBS, status=200, body=b'{"jobs": [')
        with pytest.raises(GiteaProtocolError):
            await client.list_jobs(REPO)


@pytest.mark.parametrize(
    ("status", "shown"),
    [(418, "an unexpected status"), (405, "HTTP 405"), (599, "an unexpected status")],
)
async def test_unexpected_statuses_show_only_a_fixed_phrase(client, status, shown):
    with aioresponses() as mock:
        mock.get(
            JOBS,
            status=status,
            body=b"internal-admin-password=hunter2",
            headers={"X-Internal": "db.internal:5432"},
            repeat=True,
        )
        with pytest.raises(GiteaError) as err:
            await client.list_jobs(REPO)
    text = str(err.value)
    assert shown in text
    assert "hunter2" not in text and "db.internal" not in text
    if shown == "an unexpected status":
        assert str(status) not in text


async def test_a_server_error_names_the_status_but_not_the_body(client):
    with aioresponses() as mock:
        mock.get(JOBS, status=502, body=b"upstream 10.1.2.3 refused", repeat=True)
        with pytest.raises(GiteaServerError) as err:
            await client.list_jobs(REPO)
    assert "HTTP 502" in str(err.value) and "10.1.2.3" not in str(err.value)
