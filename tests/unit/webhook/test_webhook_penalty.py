"""Forged deliveries cost little: what cannot be genuine is refused before its body is read,
and an address whose deliveries keep failing authentication stops buying the expensive
search for their secret, without delaying anyone else's genuine delivery."""

from __future__ import annotations

import asyncio

from aiohttp import ClientSession, TCPConnector

from gitea_runner_operator.webhook import verify
from gitea_runner_operator.webhook.guard import PENALTY_BURST, PENALTY_HELD, Penalties
from gitea_runner_operator.webhook.server import PATH
from gitea_runner_operator.webhook.signature import sign
from tests.support.fake_cluster import Clock
from tests.support.webhook import OPERATOR, SECRETS, A, Harness, body_for

FORGER, GITEA = "127.0.0.2", "127.0.0.1"


def test_an_address_is_penalised_after_a_burst_of_failures_and_recovers_at_the_rate():
    clock = Clock()
    penalties = Penalties(rate=1.0, burst=3, clock=clock)
    for _ in range(3):
        assert not penalties.exhausted("10.0.0.9")
        penalties.failed("10.0.0.9")
    assert penalties.exhausted("10.0.0.9")
    assert not penalties.exhausted("10.0.0.8")  # per address
    clock.now += 1.0
    assert not penalties.exhausted("10.0.0.9")  # one more a second
    penalties.failed("10.0.0.9")
    assert penalties.exhausted("10.0.0.9")


def test_the_penalised_addresses_are_bounded_in_number():
    penalties = Penalties(burst=1, max_addresses=10)
    for i in range(1000):
        penalties.failed(f"10.0.{i // 256}.{i % 256}")
    assert len(penalties._buckets) == 10


async def _post(
    port: int, source: str, body: bytes, secret: bytes, *, group: str | None = None, **headers
) -> int:
    hdrs = {
        "X-Gitea-Event": "workflow_job",
        "X-Gitea-Signature": sign(secret, body),
        "Content-Type": "application/json",
        **headers,
    }
    params = {"group": group} if group is not None else None
    async with ClientSession(connector=TCPConnector(local_addr=(source, 0))) as session:
        url = f"http://127.0.0.1:{port}{PATH}"
        async with session.post(url, data=body, headers=hdrs, params=params) as resp:
            return resp.status


def _counting_hints(monkeypatch) -> list[bytes]:
    hinted: list[bytes] = []
    real = verify.repository_hint

    def counting(body: bytes):
        hinted.append(body)
        return real(body)

    monkeypatch.setattr(verify, "repository_hint", counting)
    return hinted


async def test_a_forgers_flood_stops_costing_hints_and_genuine_deliveries_still_pass(monkeypatch):
    hinted = _counting_hints(monkeypatch)
    h = Harness(operator_secret=None, max_body=1 << 16)
    h.server._penalty_delay = 0.0
    await h.server.start()
    try:
        port = h.server.port
        forged = [await _post(port, FORGER, body_for(), b"wrong") for _ in range(PENALTY_BURST)]
        assert forged == [401] * PENALTY_BURST
        assert len(hinted) == PENALTY_BURST
        # Past the burst: refused with 429, the hint not computed, the body not read.
        more = [await _post(port, FORGER, body_for(), b"wrong") for _ in range(50)]
        assert more == [429] * 50
        assert len(hinted) == PENALTY_BURST
        # Gitea, from its own address, is not delayed by the forger's penalty.
        assert await _post(port, GITEA, body_for(), SECRETS[A]) == 202
        # Behind one proxy (the forger's address), a managed hook's ``?group=`` still passes.
        named = await _post(port, FORGER, body_for(), SECRETS[A], group="team-a/widgets")
        assert named == 202
    finally:
        await h.server.stop()
    assert h.outcomes.count("penalised") == 50


async def test_behind_a_proxy_a_system_hook_still_passes_a_penalised_address(monkeypatch):
    hinted = _counting_hints(monkeypatch)
    h = Harness(max_body=1 << 16)  # an operator-wide secret is configured
    h.server._penalty_delay = 0.0
    await h.server.start()
    try:
        port = h.server.port
        for _ in range(PENALTY_BURST + 10):
            await _post(port, FORGER, body_for(), b"wrong")
        assert len(hinted) == PENALTY_BURST
        assert await _post(port, FORGER, body_for(), OPERATOR) == 202
    finally:
        await h.server.stop()


async def test_a_body_gitea_never_sends_is_refused_unread(monkeypatch):
    hinted = _counting_hints(monkeypatch)
    h = Harness(operator_secret=None, max_body=1 << 16)
    status, _ = await h.post(
        body_for(), b"wrong", **{"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert status == 415
    assert hinted == [] and h.lookups == []
    assert h.outcomes == ["unsupported"]


async def test_a_penalised_answer_comes_late_for_a_few_requests_per_address_only():
    h = Harness(operator_secret=None, max_body=1 << 16)
    h.server._penalty_delay = 3.0
    for _ in range(PENALTY_BURST):
        h.server.penalties.failed(FORGER)
    await h.server.start()
    try:
        port = h.server.port
        forged = [
            asyncio.create_task(_post(port, FORGER, body_for(), b"wrong"))
            for _ in range(PENALTY_HELD + 6)
        ]
        done, held = await asyncio.wait(forged, timeout=2.0)
        assert len(held) == PENALTY_HELD  # the rest answered at once
        assert all(t.result() == 429 for t in done)
        # The forger's held answers do not hold Gitea back, from another address.
        assert await _post(port, GITEA, body_for(), SECRETS[A]) == 202
        assert await asyncio.gather(*held) == [429] * PENALTY_HELD
    finally:
        await h.server.stop()
