"""Forged deliveries cost little: what cannot be genuine is refused before its body is read,
and an address whose deliveries keep failing authentication for a target stops buying the
expensive search for that target's secret, without refusing any genuine delivery for another
target, from its own address (Gitea's, which every tenant's deliveries share) or another."""

from __future__ import annotations

import asyncio

from aiohttp import ClientSession, TCPConnector

from gitea_runner_operator.webhook import verify
from gitea_runner_operator.webhook.guard import (
    PENALTY_ADDRESS_BURST,
    PENALTY_BURST,
    PENALTY_HELD,
    Penalties,
)
from gitea_runner_operator.webhook.server import PATH
from gitea_runner_operator.webhook.signature import sign
from tests.support.fake_cluster import Clock
from tests.support.webhook import OPERATOR, SECRETS, A, B, Harness, body_for

FORGER, GITEA = "127.0.0.2", "127.0.0.1"


def test_a_target_is_penalised_after_a_burst_of_failures_and_recovers_at_the_rate():
    clock = Clock()
    penalties = Penalties(rate=1.0, burst=3, clock=clock)
    for _ in range(3):
        assert not penalties.exhausted("10.0.0.9", "repo:evil/app")
        penalties.failed("10.0.0.9", "repo:evil/app")
    assert penalties.exhausted("10.0.0.9", "repo:evil/app")
    assert not penalties.exhausted("10.0.0.8", "repo:evil/app")  # per address
    assert not penalties.exhausted("10.0.0.9", "repo:acme/app")  # and per target
    clock.now += 1.0
    assert not penalties.exhausted("10.0.0.9", "repo:evil/app")  # one more a second
    penalties.failed("10.0.0.9", "repo:evil/app")
    assert penalties.exhausted("10.0.0.9", "repo:evil/app")


def test_an_address_inventing_targets_is_bounded_but_its_verified_targets_still_pass():
    """A forger naming a new target each time spends the address's larger bucket; then only
    targets that verified from that address are looked up, and an address that never
    verified anything is refused before its body is read."""
    clock = Clock()
    penalties = Penalties(burst=3, address_burst=10, address_rate=1.0, clock=clock)
    penalties.verified("10.0.0.1", "repo:acme/app")
    for i in range(10):
        penalties.failed("10.0.0.1", f"repo:evil/app{i}")
        penalties.failed("10.0.0.9", f"repo:evil/app{i}")
    assert penalties.exhausted("10.0.0.1", "repo:evil/new")
    assert not penalties.exhausted("10.0.0.1", "repo:acme/app")  # verified before
    assert not penalties.exhausted("10.0.0.1")  # read: it may name a verified target
    assert penalties.exhausted("10.0.0.9")  # never verified anything: refused unread


def test_the_penalised_addresses_are_bounded_in_number():
    penalties = Penalties(burst=1, max_addresses=10)
    for i in range(1000):
        penalties.failed(f"10.0.{i // 256}.{i % 256}", f"repo:evil/{i}")
        penalties.verified(f"10.0.{i // 256}.{i % 256}", f"repo:acme/{i}")
    assert len(penalties._buckets) == len(penalties._addresses) == 10
    assert len(penalties._verified) == len(penalties._vouched) == 10


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


async def test_a_forgers_flood_stops_costing_lookups_and_genuine_deliveries_still_pass(
    monkeypatch,
):
    hinted = _counting_hints(monkeypatch)
    h = Harness(operator_secret=None, max_body=1 << 16)
    h.server._penalty_delay = 0.0
    # Time stands still for the penalties: on a loaded machine the 270 requests below took
    # seconds, the address's bucket refilled (5 a second) and a forged delivery was looked up.
    h.server.penalties = h.server.verifier._penalties = Penalties(clock=lambda: 0.0)
    await h.server.start()
    try:
        port = h.server.port
        forged = [await _post(port, FORGER, body_for(), b"wrong") for _ in range(PENALTY_BURST)]
        assert forged == [401] * PENALTY_BURST
        assert len(hinted) == PENALTY_BURST
        looked_up = len(h.lookups)
        # Past the target's burst: refused with 429, its secrets not looked up.
        more = [await _post(port, FORGER, body_for(), b"wrong") for _ in range(50)]
        assert more == [429] * 50
        assert len(h.lookups) == looked_up
        # Past the address's burst, an address that never verified is refused unread.
        for i in range(PENALTY_ADDRESS_BURST):
            await _post(port, FORGER, body_for(f"acme/invented-{i}"), b"wrong")
        hinted.clear()
        assert await _post(port, FORGER, body_for(), b"wrong") == 429
        assert hinted == []
        # Gitea, from its own address, is not delayed by the forger's penalty.
        assert await _post(port, GITEA, body_for(), SECRETS[A]) == 202
        # Behind one proxy (the forger's address), a managed hook's ``?group=`` still passes.
        named = await _post(port, FORGER, body_for(), SECRETS[A], group="team-a/widgets")
        assert named == 202
    finally:
        await h.server.stop()
    assert h.outcomes.count("penalised") >= 50


async def test_a_wrong_secret_hook_of_one_tenant_does_not_refuse_another_tenants_deliveries():
    """With the chart's NetworkPolicy, every delivery comes from Gitea's address. A tenant
    adds a hook with a wrong secret to its own repository: its 20 failures cost its own
    target only, and another tenant's genuine hand-made-hook deliveries from the same
    address are all accepted (before: 13-15 of 20 answered 429)."""
    h = Harness(operator_secret=None, max_body=1 << 16)
    h.server._penalty_delay = 0.0
    await h.server.start()
    try:
        port = h.server.port
        wrong = [await _post(port, GITEA, body_for("acme/widgets"), b"wrong") for _ in range(20)]
        assert wrong == [401] * 20
        genuine = [
            await _post(port, GITEA, body_for("acme/tools", marker=str(i)), SECRETS[B])
            for i in range(20)
        ]
        assert genuine == [202] * 20
        # The wrong hook's own target is throttled: its 21st failure is not looked up.
        assert await _post(port, GITEA, body_for("acme/widgets"), b"wrong") == 429
        # ...and team A's genuine deliveries for it pass again once its bucket refills.
    finally:
        await h.server.stop()


async def test_behind_a_proxy_a_system_hook_still_passes_a_penalised_address(monkeypatch):
    hinted = _counting_hints(monkeypatch)
    h = Harness(max_body=1 << 16)  # an operator-wide secret is configured
    h.server._penalty_delay = 0.0
    await h.server.start()
    try:
        port = h.server.port
        for _ in range(PENALTY_BURST):
            await _post(port, FORGER, body_for(), b"wrong")
        looked_up = len(h.lookups)
        for _ in range(10):
            assert await _post(port, FORGER, body_for(), b"wrong") == 429
        assert len(hinted) == PENALTY_BURST + 10 and len(h.lookups) == looked_up
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
        h.server.penalties.failed(FORGER, "repo:acme/widgets")
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
