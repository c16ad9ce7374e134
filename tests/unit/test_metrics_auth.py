"""``--metrics-auth``: /metrics answers only a bearer token the API server vouches for and
allows to ``get`` ``/metrics``; the probes stay open. A flood of invented tokens costs the
API server a bounded number of reviews, and a known scraper keeps its answers meanwhile."""

from __future__ import annotations

import asyncio
import secrets
import time

import aiohttp
from structlog.testing import capture_logs

from gitea_runner_operator.health import HealthServer
from gitea_runner_operator.kube.reviews import MetricsAccess, Reviewed
from gitea_runner_operator.metrics import Metrics
from tests.testbed.sandbox import free_port

PROMETHEUS = "prometheus-token"
STRANGER = "a-valid-token-without-the-role"


class FakeReviewer:
    """The API server's two reviews: who a token is, and whether it may get /metrics."""

    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        self.asked: list[str] = []
        self._delay = delay
        self._fail = fail

    async def review(self, token: str) -> Reviewed:
        self.asked.append(token)
        await asyncio.sleep(self._delay)
        if self._fail:
            raise TimeoutError
        if token in (PROMETHEUS, STRANGER):
            return Reviewed(authenticated=True, allowed=token == PROMETHEUS)
        return Reviewed(authenticated=False, allowed=False)


async def scrape(
    session: aiohttp.ClientSession, port: int, token: str | None, path: str = "/metrics"
) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with session.get(f"http://127.0.0.1:{port}{path}", headers=headers) as resp:
        await resp.read()
        return resp.status


async def serve(access: MetricsAccess) -> tuple[HealthServer, int]:
    port = free_port()
    server = HealthServer("127.0.0.1", port, lambda: True, Metrics(), metrics_access=access)
    await server.start()
    return server, port


async def test_only_a_token_allowed_to_get_metrics_reads_them_and_the_probes_stay_open() -> None:
    reviewer = FakeReviewer()
    server, port = await serve(MetricsAccess(reviewer))
    try:
        async with aiohttp.ClientSession() as session:
            assert await scrape(session, port, None) == 401
            assert await scrape(session, port, "invented") == 401
            assert await scrape(session, port, STRANGER) == 403
            assert await scrape(session, port, PROMETHEUS) == 200
            assert await scrape(session, port, None, "/healthz") == 200
            assert await scrape(session, port, None, "/readyz") == 200
            for _ in range(20):
                assert await scrape(session, port, PROMETHEUS) == 200
    finally:
        await server.stop()
    assert reviewer.asked.count(PROMETHEUS) == 1  # remembered, not reviewed per scrape


async def test_concurrent_scrapes_with_one_token_share_one_review() -> None:
    reviewer = FakeReviewer(delay=0.2)
    server, port = await serve(MetricsAccess(reviewer))
    try:
        async with aiohttp.ClientSession() as session:
            answers = await asyncio.gather(*(scrape(session, port, PROMETHEUS) for _ in range(16)))
    finally:
        await server.stop()
    assert answers == [200] * 16
    assert reviewer.asked == [PROMETHEUS]


async def test_a_flood_of_invented_tokens_costs_a_bounded_number_of_reviews() -> None:
    reviewer = FakeReviewer()
    access = MetricsAccess(reviewer, new_per_second=2.0, new_burst=10)
    server, port = await serve(access)
    try:
        async with aiohttp.ClientSession() as session:
            assert await scrape(session, port, PROMETHEUS) == 200  # known before the flood
            start = time.monotonic()
            flood = await asyncio.gather(
                *(scrape(session, port, secrets.token_hex(16)) for _ in range(300))
            )
            elapsed = time.monotonic() - start
            assert await scrape(session, port, PROMETHEUS) == 200  # still answered
    finally:
        await server.stop()
    invented = len(reviewer.asked) - 1
    print(f"300 invented tokens in {elapsed:.2f} s: {invented} reviews, {flood.count(429)} x 429")
    assert invented <= 10 + 2.0 * elapsed + 1
    assert set(flood) == {401, 429}


async def test_an_api_server_that_cannot_answer_is_503_and_nothing_is_remembered() -> None:
    reviewer = FakeReviewer(fail=True)
    server, port = await serve(MetricsAccess(reviewer))
    try:
        async with aiohttp.ClientSession() as session:
            assert await scrape(session, port, PROMETHEUS) == 503
            assert await scrape(session, port, PROMETHEUS) == 503
    finally:
        await server.stop()
    assert reviewer.asked == [PROMETHEUS, PROMETHEUS]


async def test_no_token_is_ever_logged() -> None:
    reviewer = FakeReviewer()
    server, port = await serve(MetricsAccess(reviewer))
    try:
        with capture_logs() as logs:
            async with aiohttp.ClientSession() as session:
                for token in (STRANGER, "invented", PROMETHEUS):
                    await scrape(session, port, token)
    finally:
        await server.stop()
    assert logs  # refusals are said
    text = repr(logs)
    assert not any(token in text for token in (STRANGER, "invented", PROMETHEUS))
