"""A client with no secret cannot make the webhook receiver work hard or hold what genuine
deliveries need: the repository hint costs a bounded amount of work whatever the body, a
body is read within a deadline and before any slot is taken, silent bodies give way to new
ones, connections are bounded in number and must send their headers in time, and a client
that goes away is one quiet log line, never a traceback.

These run the receiver as the operator runs it (``WebhookServer.start``): aiohttp's test
server cancels a handler when its client goes away, the production runner does not."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest
import structlog
from aiohttp import ClientSession

from gitea_runner_operator.webhook import guard
from gitea_runner_operator.webhook.routing import Repository
from gitea_runner_operator.webhook.server import PATH
from gitea_runner_operator.webhook.signature import sign
from gitea_runner_operator.webhook.verify import MAX_HINT_TRIES, PREFIX_BYTES, repository_hint
from tests.support.webhook import SECRETS, A, Harness, body_for

# Forged bodies that made the old hint rescan and re-parse the prefix per occurrence.
HOSTILE = {
    "keys then blanks": b'"repository"' * 2730 + b":" + b" " * 32768 + b"{",
    "nested keys": (b'{"repository":{"a":[' + b'{"repository":{"b":[' * 4000)[:PREFIX_BYTES],
    "unclosed objects": (b'{"repository":{"x":[1,' + b'"repository": {"y":[2,' * 3000),
}


@pytest.mark.parametrize("body", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_forged_body_costs_a_bounded_amount_of_work_before_authentication(body, monkeypatch):
    scanned = [0]
    real = json.JSONDecoder.raw_decode

    def counting(self, s, idx=0):
        scanned[0] += len(s) - idx  # the most one decode can read
        return real(self, s, idx)

    monkeypatch.setattr(json.JSONDecoder, "raw_decode", counting)
    started = time.process_time()
    assert repository_hint(body) is None
    spent = time.process_time() - started
    assert scanned[0] <= MAX_HINT_TRIES * PREFIX_BYTES
    assert spent < 0.5  # CPU of this process, not wall time: the old hint took 0.3-6.5 s


def test_the_hint_still_reads_a_genuine_payload():
    hint = repository_hint(body_for("acme/widgets"))
    assert hint is not None and hint.full_name == "acme/widgets"
    spaced = b'{"action": "queued", "repository"  :\n {"full_name": "acme/w"}}'
    assert repository_hint(spaced) == Repository("acme", "w")


class Live:
    """The receiver on a real port, as ``cli`` starts it."""

    def __init__(self, **options: object) -> None:
        self.h = Harness(max_body=1 << 16)
        for name, value in options.items():
            setattr(self.h.server, name, value)
        self.writers: list[asyncio.StreamWriter] = []
        self.sent = 0
        self._outcome = asyncio.Event()
        counted = self.h.operator.on_delivered
        assert counted is not None

        def on_delivery(outcome: str) -> None:
            counted(outcome)
            self._outcome.set()

        self.h.operator.on_delivered = on_delivery

    async def __aenter__(self) -> Live:
        await self.h.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for writer in self.writers:
            writer.close()
            await writer.wait_closed()
        await self.outcomes(self.sent)  # every handler has ended
        await self.h.server.stop()

    async def silent(self, source: str = "127.0.0.2") -> asyncio.StreamWriter:
        """A connection that sends a signed request's headers and then nothing."""
        _, writer = await asyncio.open_connection(
            "127.0.0.1", self.h.server.port, local_addr=(source, 0)
        )
        writer.write(
            f"POST {PATH} HTTP/1.1\r\nHost: x\r\nX-Gitea-Event: workflow_job\r\n"
            "Content-Type: application/json\r\n"
            f"X-Gitea-Signature: {'ab' * 32}\r\nContent-Length: 1000\r\n\r\n{{".encode()
        )
        await writer.drain()
        self.writers.append(writer)
        self.sent += 1
        return writer

    async def post(self, body: bytes, secret: bytes) -> int:
        self.sent += 1
        hdrs = {
            "X-Gitea-Event": "workflow_job",
            "X-Gitea-Signature": sign(secret, body),
            "Content-Type": "application/json",
        }
        async with ClientSession() as session:
            url = f"http://127.0.0.1:{self.h.server.port}{PATH}"
            async with session.post(url, data=body, headers=hdrs) as resp:
                return resp.status

    async def outcomes(self, count: int) -> list[str]:
        """The first ``count`` outcomes (a guard, not a timing: a handler that never ends
        fails the test instead of hanging it)."""
        async with asyncio.timeout(10):
            while len(self.h.outcomes) < count:
                self._outcome.clear()
                await self._outcome.wait()
        return self.h.outcomes


async def test_silent_connections_do_not_block_a_signed_delivery():
    async with Live(_slot_wait=0.2) as live:
        for _ in range(8):
            await live.silent()
        assert await live.post(body_for(), SECRETS[A]) == 202
        assert "team-a/widgets" in live.h.woken


async def test_one_client_reads_only_a_few_bodies_at_once_its_newest():
    """A fifth and sixth body from one address give up that address's two oldest reads
    (408), not the new ones: behind a proxy every client shares one address, and the new
    read is the one a genuine delivery would be."""
    async with Live(_read_deadline=30.0) as live:
        for _ in range(6):
            await live.silent()
        assert await live.outcomes(2) == ["slow", "slow"]
        assert list(live.h.server._reads._reads) == [2, 3, 4, 5]  # the newest four read on
        assert live.h.server._reads.given_up == 2


async def test_a_body_that_does_not_arrive_in_time_is_408_and_frees_its_place():
    async with Live(_read_deadline=0.2) as live:
        await live.silent()
        assert await live.outcomes(1) == ["slow"]
        assert len(live.h.server._reads) == 0


async def genuine(live: Live, n: int = 10) -> list[int]:
    """``n`` signed deliveries, one after the other, as Gitea sends them."""
    return [await live.post(body_for(), SECRETS[A]) for _ in range(n)]


@pytest.mark.parametrize(
    ("silent", "addresses"),
    [(64, 16), (128, 32), (16, 1)],
    ids=["64 from 16 addresses", "128 from 32 addresses", "16 from the proxy's address"],
)
async def test_genuine_deliveries_get_through_past_silent_bodies(silent, addresses):
    """Issue 36 row 9: connections that send a request's headers and then no body, from
    many addresses or all from the address Gitea's deliveries come from too (one proxy in
    front of the receiver): every genuine signed delivery is accepted (before: 5 of 10,
    2 of 10, and 0 behind the proxy, each answered 429)."""
    async with Live(_read_deadline=30.0) as live:
        for i in range(silent):
            await live.silent(f"127.0.1.{i % addresses + 1}" if addresses > 1 else "127.0.0.1")
        assert await genuine(live) == [202] * 10
        assert len(live.h.server._reads) <= guard.DEFAULT_READS


async def open_quiet(
    live: Live, source: str = "127.0.0.2", head: bytes = b""
) -> asyncio.StreamReader:
    """A connection that sends ``head`` (maybe nothing) and then waits."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", live.h.server.port, local_addr=(source, 0)
    )
    if head:
        writer.write(head)
        await writer.drain()
    live.writers.append(writer)
    return reader


async def closed(reader: asyncio.StreamReader) -> bool:
    """Whether the receiver closed the connection (a guard, not a timing: 10 s)."""
    async with asyncio.timeout(10):
        return await reader.read() == b""


@pytest.mark.parametrize("head", [b"", b"POST /hooks/gitea HTTP/1.1\r\nX-Gitea-Ev"])
async def test_a_connection_that_sends_no_whole_request_is_closed_at_its_header_deadline(head):
    async with Live() as live:
        live.h.server.connections._deadline = 0.2
        reader = await open_quiet(live, head=head)
        assert await closed(reader)
        assert live.h.server.connections.closed_silent == 1
        assert len(live.h.server.connections) == 0


async def test_past_the_connection_cap_the_oldest_waiting_connection_makes_room():
    """Hundreds of connections that send nothing, from any addresses: the receiver keeps
    at most its cap open, closing the longest waiting ones, and a genuine delivery on a new
    connection is still handled."""
    async with Live() as live:
        live.h.server.connections._cap = 32
        readers = [await open_quiet(live, f"127.0.2.{i % 8 + 1}") for i in range(200)]
        assert await genuine(live, 3) == [202] * 3
        assert all([await closed(r) for r in readers[:160]])
        assert len(live.h.server.connections) <= 32
        assert live.h.server.connections.refused == 0


async def test_a_connection_handling_a_request_is_never_closed_to_make_room():
    async with Live(_read_deadline=30.0) as live:
        live.h.server.connections._cap = 4
        await live.silent()  # its headers are in: handling a request (its body)
        quiet = [await open_quiet(live) for _ in range(3)]
        await open_quiet(live)  # the fifth: the oldest quiet one goes, not the busy one
        assert await closed(quiet[0])
        assert len(live.h.server._reads) == 1
        assert live.h.server.connections.closed_waiting == 1


async def test_a_client_that_goes_away_is_one_quiet_line_and_no_traceback(caplog):
    caplog.set_level(logging.DEBUG)
    async with Live() as live:
        with structlog.testing.capture_logs() as logs:
            for _ in range(3):
                await live.silent()
            await asyncio.sleep(0.05)
            for writer in live.writers:
                writer.close()
            assert await live.outcomes(3) == ["gone"] * 3
            await asyncio.sleep(0.05)  # let aiohttp finish (and log, if it would) the answer
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []
    assert [e["event"] for e in logs] == ["webhook client went away before its delivery was read"]
    assert not any("exc_info" in e or "exception" in e for e in logs)
