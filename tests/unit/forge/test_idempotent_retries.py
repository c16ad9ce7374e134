"""Only idempotent requests are retried: a POST or PATCH whose answer was lost may have been
done, so it is never sent again blindly; the caller's next pass reads what is there first."""

from __future__ import annotations

import re

import aiohttp
import pytest
from aioresponses import aioresponses

from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.forge.client import GiteaClient
from gitea_runner_operator.forge.errors import GiteaServerError, GiteaUnreachable
from gitea_runner_operator.forge.hooks import HookClient
from gitea_runner_operator.forge.reruns import rerun_job
from gitea_runner_operator.forge.scope import ScopeRef

BASE = "http://gitea.test"
ORG = ScopeRef(Scope.ORG, "acme")
HOOKS = re.compile(r"^http://gitea\.test/api/v1/orgs/acme/hooks(\?.*)?$")
HOOK_URL = "http://operator.test/hooks/gitea"
RERUN = f"{BASE}/api/v1/repos/acme/app/actions/runs/7/jobs/9/rerun"
LOST = {"timeout": {"exception": TimeoutError()}, "502": {"status": 502}}


@pytest.fixture
async def client():
    async def no_sleep(seconds: float) -> None:
        return None

    session = aiohttp.ClientSession()
    yield GiteaClient(session, BASE, "tok", sleep=no_sleep, attempts=4)
    await session.close()


def sent(mock: aioresponses, method: str) -> int:
    return sum(len(calls) for (m, _), calls in mock.requests.items() if m == method)


@pytest.mark.parametrize("lost", LOST.values(), ids=LOST.keys())
@pytest.mark.parametrize("method", ["POST", "PATCH"])
async def test_a_request_that_is_not_idempotent_is_sent_once(client, method, lost):
    with aioresponses() as mock:
        mock.add(f"{BASE}/api/v1/thing", method, **lost)
        mock.add(f"{BASE}/api/v1/thing", method, status=200, payload={"id": 1})
        with pytest.raises((GiteaUnreachable, GiteaServerError)):
            await client.call(method, "/api/v1/thing", json_body={})
        assert sent(mock, method) == 1


@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_idempotent_requests_are_still_retried(client, method):
    with aioresponses() as mock:
        mock.add(f"{BASE}/api/v1/thing", method, status=502)
        mock.add(f"{BASE}/api/v1/thing", method, status=200, payload={"id": 1})
        assert await client.call(method, "/api/v1/thing") == {"id": 1}
        assert sent(mock, method) == 2


async def test_a_rerun_whose_answer_was_lost_is_not_posted_again_nor_taken_as_refused(client):
    with aioresponses() as mock:
        mock.post(RERUN, exception=TimeoutError())  # Gitea re-ran it; the answer was lost
        mock.post(RERUN, status=400)  # what a second POST would get: "run not done"
        with pytest.raises(GiteaUnreachable):  # postponed; the next pass reads the run
            await rerun_job(client, "acme/app", 7, 9)
        assert sent(mock, "POST") == 1


async def test_a_hook_whose_answer_was_lost_is_found_by_reading_not_made_twice(client):
    hooks = HookClient(client.call)
    made = {"id": 5, "config": {"url": HOOK_URL}}
    with aioresponses() as mock:
        mock.get(HOOKS, payload=[])
        mock.post(HOOKS, status=502)  # made, but the answer did not come back
        with pytest.raises(GiteaServerError):
            await hooks.ensure_hook(ORG, HOOK_URL, "s3cret")
        mock.get(HOOKS, payload=[made])  # the next pass lists first
        mock.patch(f"{BASE}/api/v1/orgs/acme/hooks/5", payload=made)
        state = await hooks.ensure_hook(ORG, HOOK_URL, "s3cret")
        assert (state.id, state.created) == (5, False)
        assert sent(mock, "POST") == 1
