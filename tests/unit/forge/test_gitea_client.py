"""The Gitea client against aioresponses. Mocked because these cases (429 with Retry-After,
5xx bursts, broken JSON) cannot be provoked on demand from a real Gitea; the integration
suite runs the same client against a real one."""

import re

import aiohttp
import pytest
from aioresponses import aioresponses

from gitea_runner_operator.api.gitea import OwnerKind
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.forge.client import GiteaClient, parse_retry_after
from gitea_runner_operator.forge.errors import (
    GiteaForbidden,
    GiteaNotFound,
    GiteaProtocolError,
    GiteaRateLimited,
    GiteaRedirected,
    GiteaServerError,
    GiteaUnauthorized,
    GiteaUnreachable,
    GiteaUnsupported,
)
from gitea_runner_operator.forge.scope import ScopeRef

BASE = "http://gitea.test"
TOKEN = "s3cr3t-token-value"
REPO = ScopeRef(Scope.REPO, "acme", "widgets")
JOBS = re.compile(r"^http://gitea\.test/api/v1/repos/acme/widgets/actions/jobs\?.*$")


def job(i, status="queued"):
    return {"id": i, "run_id": 1, "name": f"j{i}", "labels": ["linux"], "status": status}


@pytest.fixture
async def make_client():
    sessions = []
    sleeps: list[float] = []

    async def fake_sleep(seconds):
        sleeps.append(seconds)

    def make(**kwargs):
        session = aiohttp.ClientSession()
        sessions.append(session)
        opts = {"backoff_initial": 0.01, "backoff_max": 0.02, "sleep": fake_sleep, **kwargs}
        client = GiteaClient(session, BASE + "/", TOKEN, **opts)
        client.sleeps = sleeps
        return client

    yield make
    for session in sessions:
        await session.close()


async def test_pagination_follows_total_count_even_when_the_server_clamps_limit(make_client):
    client = make_client(page_size=50)
    with aioresponses() as mock:
        # The server clamps limit to 2 (MAX_RESPONSE_ITEMS); 5 jobs in all.
        mock.get(JOBS, payload={"jobs": [job(1), job(2)], "total_count": 5})
        mock.get(JOBS, payload={"jobs": [job(3), job(4)], "total_count": 5})
        mock.get(JOBS, payload={"jobs": [job(5)], "total_count": 5})
        listing = await client.list_jobs(REPO)
        requests = [key for key in mock.requests]
    assert listing.complete
    assert sorted(j.id for j in listing.items) == [1, 2, 3, 4, 5]
    assert [str(url).split("page=")[1].split("&")[0] for _, url in requests] == ["1", "2", "3"]
    assert all("status=queued" in str(url) for _, url in requests)


async def test_pagination_stops_at_the_page_cap(make_client):
    client = make_client(page_size=1, max_pages=3)
    with aioresponses() as mock:
        for i in range(1, 4):
            mock.get(JOBS, payload={"jobs": [job(i)], "total_count": 1000})
        listing = await client.list_jobs(REPO)
    assert not listing.complete
    assert len(listing.items) == 3


async def test_token_is_sent_as_authorization_header_only(make_client):
    client = make_client()
    with aioresponses() as mock:
        mock.get(JOBS, payload={"jobs": [], "total_count": 0})
        await client.list_jobs(REPO)
        ((_, url), calls) = next(iter(mock.requests.items()))
    assert calls[0].kwargs["headers"]["Authorization"] == f"token {TOKEN}"
    assert TOKEN not in str(url)
    assert TOKEN not in repr(client)


@pytest.mark.parametrize(
    ("status", "error"),
    [(401, GiteaUnauthorized), (403, GiteaForbidden)],
)
async def test_auth_failures_are_not_retried(make_client, status, error):
    client = make_client()
    with aioresponses() as mock:
        mock.get(JOBS, status=status, repeat=True)
        with pytest.raises(error):
            await client.list_jobs(REPO)
        assert sum(len(c) for c in mock.requests.values()) == 1
    assert client.sleeps == []


async def test_missing_jobs_endpoint_means_gitea_is_too_old(make_client):
    client = make_client()
    with aioresponses() as mock:
        mock.get(JOBS, status=404)
        with pytest.raises(GiteaUnsupported, match=r"1\.25"):
            await client.list_jobs(REPO)


async def test_missing_repository_is_not_found(make_client):
    client = make_client()
    with aioresponses() as mock:
        mock.get(f"{BASE}/api/v1/repos/acme/widgets", status=404)
        with pytest.raises(GiteaNotFound, match="acme/widgets"):
            await client.resolve_scope(REPO)


async def test_org_scope_falls_back_to_the_tokens_own_user(make_client):
    client = make_client()
    with aioresponses() as mock:
        mock.get(f"{BASE}/api/v1/orgs/alice", status=404)
        mock.get(f"{BASE}/api/v1/user", payload={"login": "alice"})
        scope = await client.resolve_scope(ScopeRef(Scope.ORG, "alice"))
    assert scope.owner_kind is OwnerKind.USER
    assert scope.jobs_path == "/api/v1/user/actions/jobs"


async def test_429_with_retry_after_waits_as_told(make_client):
    client = make_client()
    with aioresponses() as mock:
        mock.get(JOBS, status=429, headers={"Retry-After": "3"})
        mock.get(JOBS, payload={"jobs": [job(1)], "total_count": 1})
        listing = await client.list_jobs(REPO)
    assert [j.id for j in listing.items] == [1]
    assert client.sleeps == [3.0]


async def test_long_retry_after_is_handed_to_the_poll_loop(make_client):
    client = make_client(max_inline_wait=5)
    with aioresponses() as mock:
        mock.get(JOBS, status=503, headers={"Retry-After": "120"})
        with pytest.raises(GiteaRateLimited) as err:
            await client.list_jobs(REPO)
    assert err.value.retry_after == 120
    assert "retry after 120s" in str(err.value)
    assert client.sleeps == []


async def test_a_huge_retry_after_is_capped():
    assert parse_retry_after("86400") == 86400  # parsing is exact; the client caps it


async def test_retry_after_is_capped_so_a_server_cannot_park_a_group(make_client):
    client = make_client()
    with aioresponses() as mock:
        mock.get(JOBS, status=429, headers={"Retry-After": "86400"})
        with pytest.raises(GiteaRateLimited) as err:
            await client.list_jobs(REPO)
    assert err.value.retry_after == 300


async def test_any_persistent_429_is_rate_limited_not_unreachable(make_client):
    client = make_client(attempts=2)
    with aioresponses() as mock:
        mock.get(JOBS, status=429, headers={"Retry-After": "1"}, repeat=True)
        with pytest.raises(GiteaRateLimited, match="retry after 1s") as err:
            await client.list_jobs(REPO)
    assert err.value.reason == "GiteaRateLimited"


async def test_redirects_are_not_followed_with_the_token(make_client):
    client = make_client()
    with aioresponses() as mock:
        mock.get(JOBS, status=302, headers={"Location": "http://evil.test/steal"})
        with pytest.raises(GiteaRedirected) as err:
            await client.list_jobs(REPO)
        assert len(mock.requests) == 1  # nothing sent to the Location
    assert err.value.reason == "GiteaRedirected"
    # The Location is never echoed: it would tell a tenant what an internal service says.
    assert "evil" not in str(err.value) and "steal" not in str(err.value)
    assert "redirect (HTTP 302)" in str(err.value)


async def test_connection_errors_say_no_answer_never_the_socket_error(make_client):
    client = make_client(attempts=1)
    with aioresponses() as mock:
        mock.get(JOBS, exception=aiohttp.ClientConnectionError("Connection refused to 10.0.0.9"))
        with pytest.raises(GiteaUnreachable) as err:
            await client.list_jobs(REPO)
    assert "refused" not in str(err.value) and "no answer" in str(err.value)
    assert "refused" in err.value.detail  # kept for the operator's own log


async def test_5xx_is_retried_with_backoff_then_succeeds(make_client):
    client = make_client()
    with aioresponses() as mock:
        mock.get(JOBS, status=502)
        mock.get(JOBS, status=500)
        mock.get(JOBS, payload={"jobs": [job(1)], "total_count": 1})
        listing = await client.list_jobs(REPO)
    assert len(listing.items) == 1
    assert len(client.sleeps) == 2
    assert all(0 < s <= 0.03 for s in client.sleeps)


async def test_persistent_5xx_is_a_server_error_not_unreachable(make_client):
    client = make_client(attempts=3)
    with aioresponses() as mock:
        mock.get(JOBS, status=500, repeat=True)
        with pytest.raises(GiteaServerError, match="500"):
            await client.list_jobs(REPO)
        assert sum(len(c) for c in mock.requests.values()) == 3


async def test_connection_errors_are_retried(make_client):
    client = make_client(attempts=2)
    with aioresponses() as mock:
        mock.get(JOBS, exception=aiohttp.ClientConnectionError("refused"))
        mock.get(JOBS, payload={"jobs": [], "total_count": 0})
        listing = await client.list_jobs(REPO)
    assert listing.items == ()


@pytest.mark.parametrize(
    "body",
    [
        "<html>proxy error</html>",
        '{"jobs": [{"id": "x"}], "total_count": 1}',
        '["not", "an", "object"]',
    ],
)
async def test_malformed_responses_are_protocol_errors(make_client, body):
    client = make_client()
    with aioresponses() as mock:
        mock.get(JOBS, body=body, content_type="application/json")
        with pytest.raises(GiteaProtocolError):
            await client.list_jobs(REPO)


async def test_runners_and_deletion(make_client):
    client = make_client()
    runners_url = re.compile(r"^http://gitea\.test/api/v1/admin/actions/runners\?.*$")
    scope = ScopeRef(Scope.GLOBAL)
    with aioresponses() as mock:
        mock.get(
            runners_url,
            payload={
                "runners": [
                    {
                        "id": 4,
                        "name": "ci-aaaaa-bbbbb",
                        "status": "online",
                        "busy": True,
                        "ephemeral": True,
                        "labels": [{"id": 1, "name": "linux", "type": "custom"}],
                    }
                ],
                "total_count": 1,
            },
        )
        mock.delete(f"{BASE}/api/v1/admin/actions/runners/4", status=204)
        mock.delete(f"{BASE}/api/v1/admin/actions/runners/5", status=404)
        (runner,) = (await client.list_runners(scope)).items
        assert runner.busy and runner.online and runner.ephemeral
        assert await client.delete_runner(scope, 4) is True
        assert await client.delete_runner(scope, 5) is False


def test_retry_after_accepts_seconds_and_dates():
    assert parse_retry_after("7") == 7
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480) == 10
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


async def test_a_long_queue_is_read_past_the_old_twenty_page_cut(make_client):
    """Measured before: 1,050 older queued jobs for other labels hid a team's 3 jobs for as
    long as the test ran (20 pages of 50). The whole queue is read now (up to 200 pages)."""
    client = make_client()
    total = 1053
    with aioresponses() as mock:
        for page in range(22):
            ids = range(page * 50 + 1, min(total, (page + 1) * 50) + 1)
            mock.get(JOBS, payload={"jobs": [job(i) for i in ids], "total_count": total})
        listing = await client.list_jobs(REPO)
    assert listing.complete and len(listing.items) == total
    assert {1051, 1052, 1053} <= {j.id for j in listing.items}
