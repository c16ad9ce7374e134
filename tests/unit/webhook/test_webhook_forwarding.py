"""--sharding: a delivery that reaches a replica not serving its groups is handed, as Gitea
sent it, to the replica that does, which verifies it itself; and the hand-over is bounded
(a silent peer, a peer that answers a huge body, too many under way) and off Gitea's path."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import structlog

from gitea_runner_operator.sharding.forwards import Split
from gitea_runner_operator.webhook.forwarding import FORWARDED_HEADER, Forwarder
from gitea_runner_operator.webhook.server import PATH
from gitea_runner_operator.webhook.signature import sign
from tests.support.forwarding import Handler, raw_peer, settled, silent
from tests.support.webhook import OPERATOR, SECRETS, A, Harness, body_for

HEADERS = {"X-Gitea-Event": "workflow_job", "Content-Type": "application/json"}


def to_peer(address: str, *forwarded: str) -> Callable[[Sequence[str]], Split]:
    """A split that says ``forwarded`` are served at ``address``, the rest here."""

    def split(keys: Sequence[str]) -> Split:
        here = tuple(k for k in keys if k not in forwarded)
        there = tuple(k for k in keys if k in forwarded)
        return Split(here, {address: there} if there else {})

    return split


def answering(status: str, size: int, sent: list[int]) -> Handler:
    """Answers ``status`` with a body of ``size`` bytes, counting what it managed to send."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(f"HTTP/1.1 {status}\r\nContent-Length: {size}\r\n\r\n".encode())
        chunk = b"x" * (1 << 16)
        sent.append(0)
        while sent[-1] < size:
            writer.write(chunk)
            await writer.drain()
            sent[-1] += len(chunk)

    return handler


async def test_a_delivery_for_a_peers_group_is_woken_there_not_here() -> None:
    peer = Harness()
    await peer.server.start()
    outcomes: list[str] = []
    forwarder = Forwarder("pod-a", on_outcome=outcomes.append)
    address = f"127.0.0.1:{peer.server.port}"
    here = Harness(split=to_peer(address, "team-a/widgets-gpu"), forwarder=forwarder)
    try:
        # Signed with team A's secret and sent to the group's managed hook (?group=): the
        # peer verifies the very same signature over the very same body and query.
        body = body_for(labels=("linux", "gpu"))
        status, text = await here.post(body, SECRETS[A], params_group="team-a/widgets-gpu")
        await settled(forwarder)
    finally:
        await here.server.stop()
        await peer.server.stop()
    assert status == 202 and "1 of them served by other replicas" in text
    assert here.woken == []
    assert peer.woken == ["team-a/widgets-gpu"]
    assert peer.outcomes == ["accepted"] and outcomes == ["sent"]


async def test_only_the_peers_groups_are_forwarded_and_the_rest_woken_here() -> None:
    peer = Harness()
    await peer.server.start()
    forwarder = Forwarder("pod-a")
    address = f"127.0.0.1:{peer.server.port}"
    here = Harness(split=to_peer(address, "team-b/acme"), forwarder=forwarder)
    try:
        status, _ = await here.post(body_for(), OPERATOR)
        await settled(forwarder)
    finally:
        await here.server.stop()
        await peer.server.stop()
    assert status == 202
    assert here.woken == ["team-a/widgets", "team-a/widgets-gpu", "ops/everything"]
    # The peer routes the delivery itself; it wakes every group routing picks there. A
    # group it does not serve only gets queued and refused by its workers, as before.
    assert "team-b/acme" in peer.woken


async def test_a_forwarded_delivery_is_woken_where_it_arrives_and_never_forwarded_again() -> None:
    asked: list[Sequence[str]] = []
    sends: list[str] = []

    class Spy(Forwarder):
        def send(self, address: str, *args: object, **kwargs: object) -> bool:
            sends.append(address)
            return True

    def split(keys: Sequence[str]) -> Split:
        asked.append(keys)
        return Split(peers={"10.0.0.9:8082": tuple(keys)})

    here = Harness(split=split, forwarder=Spy("pod-b"))
    status, _ = await here.post(body_for(), OPERATOR, **{FORWARDED_HEADER: "pod-a"})
    assert status == 202
    assert here.woken == ["team-a/widgets", "team-a/widgets-gpu", "team-b/acme", "ops/everything"]
    assert asked == [] and sends == []
    # Without the mark, the same replica would have forwarded it.
    status, _ = await here.post(body_for(marker="other"), OPERATOR)
    assert sends == ["10.0.0.9:8082"]


async def test_gitea_gets_its_answer_without_waiting_for_a_silent_peer() -> None:
    outcomes: list[str] = []
    forwarder = Forwarder("pod-a", timeout=3.0, on_outcome=outcomes.append)
    async with raw_peer(silent) as address:
        here = Harness(split=to_peer(address, "team-b/acme"), forwarder=forwarder)
        started = time.monotonic()
        status, _ = await here.post(body_for(), OPERATOR)
        answered = time.monotonic() - started
        with structlog.testing.capture_logs() as logs:
            waited = await settled(forwarder, within=10.0)
        await forwarder.close()
    assert status == 202 and answered < 2.5  # the forward was still waiting then
    assert outcomes == ["failed"]
    assert answered + waited < 6.0  # cut at its timeout, not left hanging
    assert [e["event"] for e in logs] == ["webhook forward failed"]
    assert logs[0]["error"] == "TimeoutError" and logs[0]["peer"] == address


async def test_a_refusal_with_a_huge_body_is_failed_without_reading_the_body() -> None:
    outcomes: list[str] = []
    sent: list[int] = []
    size = 1 << 30
    forwarder = Forwarder("pod-a", timeout=10.0, on_outcome=outcomes.append)
    async with raw_peer(answering("403 Forbidden", size, sent)) as address:
        forwarder.send(address, PATH, b"{}", HEADERS)
        waited = await settled(forwarder)
        await forwarder.close()
    assert outcomes == ["failed"]
    assert waited < 5.0  # well before the 10 s timeout
    assert sent and sent[0] < size // 16  # the connection went away long before the end


async def test_an_accepting_peer_with_an_endless_body_counts_as_sent_at_once() -> None:
    outcomes: list[str] = []
    forwarder = Forwarder("pod-a", timeout=10.0, on_outcome=outcomes.append)
    async with raw_peer(answering("202 Accepted", 1 << 30, [])) as address:
        forwarder.send(address, PATH, b"{}", HEADERS)
        waited = await settled(forwarder)
        await forwarder.close()
    assert outcomes == ["sent"] and waited < 5.0  # well before the 10 s timeout


async def test_past_the_cap_forwards_are_dropped_counted_and_said_once() -> None:
    outcomes: list[str] = []
    forwarder = Forwarder("pod-a", timeout=30.0, in_flight=2, on_outcome=outcomes.append)
    async with raw_peer(silent) as address:
        with structlog.testing.capture_logs() as logs:
            accepted = [forwarder.send(address, PATH, b"{}", HEADERS) for _ in range(5)]
        assert accepted == [True, True, False, False, False]
        assert len(forwarder) == 2
        await forwarder.close()  # cancels what is under way
    assert len(forwarder) == 0
    assert outcomes == ["dropped"] * 3
    assert [e["event"] for e in logs] == ["webhook forwards dropped: too many under way"]


async def test_an_unreachable_peer_fails_quickly_and_its_failures_are_said_once() -> None:
    outcomes: list[str] = []
    forwarder = Forwarder("pod-a", timeout=2.0, on_outcome=outcomes.append)
    async with raw_peer(silent) as address:
        pass  # closed: nothing listens there any more
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            forwarder.send(address, PATH, b"{}", HEADERS)
            await settled(forwarder)
    await forwarder.close()
    assert outcomes == ["failed"] * 3
    assert [e["event"] for e in logs] == ["webhook forward failed"]


async def test_the_peer_receives_gitea_s_body_and_headers_marked_forwarded() -> None:
    seen: list[bytes] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        seen.append(head + await reader.readexactly(length))
        writer.write(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()

    forwarder = Forwarder("pod-a")
    body = body_for()
    async with raw_peer(record) as address:
        here = Harness(split=to_peer(address, "team-b/acme"), forwarder=forwarder)
        await here.post(body, OPERATOR, params_group="team-b/acme", **{"X-Gitea-Delivery": "d-1"})
        await settled(forwarder)
        await forwarder.close()
    assert len(seen) == 1
    head, _, got = seen[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == f"POST {PATH}?group=team-b/acme HTTP/1.1"
    fields = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    assert got == body
    assert fields["x-gitea-signature"] == sign(OPERATOR, body)
    assert fields["x-gitea-event"] == "workflow_job"
    assert fields["x-gitea-delivery"] == "d-1"
    assert fields["content-type"] == "application/json"
    assert fields[FORWARDED_HEADER.lower()] == "pod-a"
