"""The webhook receiver on a thread of its own (runtime/receiver_thread.py) and the port it
reaches the controller through (runtime/webhook_port.py with the controller's loop)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest

from gitea_runner_operator.health import HealthServer
from gitea_runner_operator.metrics import Metrics
from gitea_runner_operator.runtime import webhook_port
from gitea_runner_operator.runtime.leadership import Leadership
from gitea_runner_operator.runtime.receiver_thread import ReceiverThread, on_loop
from gitea_runner_operator.runtime.webhook_port import OperatorPort
from gitea_runner_operator.webhook.routing import SecretLocation
from gitea_runner_operator.webhook.secrets import CachedSecretReader
from gitea_runner_operator.webhook.server import Limits, WebhookServer
from gitea_runner_operator.webhook.signature import sign
from tests.support.webhook import body_for, post_delivery
from tests.testbed.sandbox import free_port

HOOK = SecretLocation("team-a", "hook", "secret")
SECRET = b"team-a-secret"


def group_object() -> dict[str, Any]:
    return {
        "metadata": {"namespace": "team-a", "name": "ci", "uid": "u1", "generation": 1},
        "spec": {
            "scope": "org",
            "org": "acme",
            "gitea": {"url": "https://git.example.com/"},
            "labels": ["linux:docker://node:20"],
            "maxActiveRunners": 2,
            "registrationToken": {"secretRef": {"name": "t", "key": "r"}},
            "authToken": {"secretRef": {"name": "t", "key": "a"}},
            "webhook": {"secretRef": {"name": "hook", "key": "secret"}},
        },
    }


@dataclass
class Cache:
    group_changes: int = 1

    def group_objects(self) -> list[dict[str, Any]]:
        return [group_object()]


@dataclass
class Pollers:
    def get(self, key: str) -> None:
        return None


@dataclass
class Controller:
    """What the port asks of a controller; records on which thread it was told."""

    cache: Cache = field(default_factory=Cache)
    pollers: Pollers = field(default_factory=Pollers)
    share: Any = None
    woken: list[tuple[str, int, float]] = field(default_factory=list)
    heard_for: list[tuple[str, int | None, int]] = field(default_factory=list)

    def wake(self, key: str) -> None:
        self.woken.append((key, threading.get_ident(), time.monotonic()))

    def heard(self, key: str, job_id: int | None) -> None:
        self.heard_for.append((key, job_id, threading.get_ident()))

    def knows(self, key: str, job_id: int) -> bool:
        return False


def port_over(controller: Controller, main: asyncio.AbstractEventLoop) -> OperatorPort:
    leadership = Leadership()
    leadership.controller = controller  # type: ignore[assignment]
    reads: list[int] = []

    async def read(where: SecretLocation) -> bytes:
        reads.append(threading.get_ident())
        return SECRET

    reader = CachedSecretReader(None, read=on_loop(main, read))
    port = OperatorPort(leadership, reader, Metrics(), main)
    port.reads = reads  # type: ignore[attr-defined]
    return port


def deliver(port: int, job_id: int) -> tuple[int, float]:
    """POST a signed delivery as Gitea would, from a thread; its status and when it came."""
    body = body_for("acme/widgets", job_id=job_id)
    status = post_delivery(port, body, sign(SECRET, body), timeout=10)
    return int(status), time.monotonic()


def busy(seconds: float) -> float:
    """Hold the calling loop, computing (as a parse would), for ``seconds``; when it ended."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(1000))
    return time.monotonic()


async def test_a_delivery_is_answered_while_the_controller_s_loop_is_busy() -> None:
    main = asyncio.get_running_loop()
    controller = Controller()
    port = port_over(controller, main)
    # Paced wakes off: each delivery wakes its group at once.
    receiver = ReceiverThread(WebhookServer("127.0.0.1", 0, port, limits=Limits(wake_interval=0)))
    await receiver.start()
    try:
        # The first delivery reads the hook secret, through the controller's loop.
        status, _ = await asyncio.to_thread(deliver, receiver.port, 1)
        assert status == 202
        assert port.reads == [threading.get_ident()]  # type: ignore[attr-defined]
        answered: list[tuple[int, float]] = []
        sender = threading.Thread(target=lambda: answered.append(deliver(receiver.port, 2)))
        sender.start()
        freed = busy(1.0)  # the controller's loop computes; the receiver's does not wait
        await asyncio.to_thread(sender.join, 10)
        [(status, at)] = answered
        assert status == 202
        assert at < freed - 0.5, "the delivery waited for the controller's loop"
        await asyncio.sleep(0)  # the wake was handed over; the loop runs it now
        assert [key for key, _, _ in controller.woken] == ["team-a/ci", "team-a/ci"]
        # Made on the controller's loop (its thread), once that loop was free again.
        assert {ident for _, ident, _ in controller.woken} == {threading.get_ident()}
        assert controller.woken[-1][2] >= freed
        assert [(k, j) for k, j, _ in controller.heard_for] == [("team-a/ci", 1), ("team-a/ci", 2)]
        assert port.reads == [threading.get_ident()]  # type: ignore[attr-defined]
    finally:
        await receiver.stop()


async def test_stopping_ends_the_thread_and_closes_the_port() -> None:
    port = port_over(Controller(), asyncio.get_running_loop())
    receiver = ReceiverThread(WebhookServer("127.0.0.1", 0, port))
    await receiver.start()
    bound = receiver.port
    await receiver.stop()
    assert not any(t.name == "webhook-receiver" and t.is_alive() for t in threading.enumerate())
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", bound), 1):
        pass
    await receiver.stop()  # twice: nothing left to stop


async def test_a_port_in_use_is_reported_by_start() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        main = asyncio.get_running_loop()
        receiver = ReceiverThread(WebhookServer("127.0.0.1", port, port_over(Controller(), main)))
        with pytest.raises(OSError):
            await receiver.start()
        await receiver.stop()  # never started: nothing to stop


async def test_the_replicas_split_is_asked_of_the_controller_s_loop_and_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[int] = []

    class Share:
        def split(self, keys: Any) -> Any:
            asked.append(threading.get_ident())
            return ("split", tuple(keys))

    controller = Controller(share=Share())
    port = port_over(controller, asyncio.get_running_loop())

    def on_the_receivers_loop() -> tuple[Any, int]:
        """The split as the receiver's loop awaits it, and how often that loop turned
        meanwhile (it serves other deliveries while it waits)."""

        async def ask() -> tuple[Any, int]:
            turns = 0

            async def turning() -> None:
                nonlocal turns
                while True:
                    turns += 1
                    await asyncio.sleep(0.01)

            ticker = asyncio.create_task(turning())
            try:
                return await port.split(["team-a/ci"]), turns
            except TimeoutError:
                return "timed out", turns
            finally:
                ticker.cancel()

        return asyncio.run(ask())

    # Answered on the controller's loop.
    got, _ = await asyncio.to_thread(on_the_receivers_loop)
    assert got == ("split", ("team-a/ci",))
    assert asked == [threading.get_ident()]
    # A controller's loop that does not answer in time: the receiver's loop goes on
    # meanwhile, gives up at the bound (the dispatcher then wakes the groups here,
    # webhook/dispatch.py), and the split is never made.
    monkeypatch.setattr(webhook_port, "SPLIT_WAIT", 0.2)
    waiting = asyncio.get_running_loop().run_in_executor(None, on_the_receivers_loop)
    busy(0.6)
    got, turns = await waiting
    assert got == "timed out"
    assert turns >= 10
    await asyncio.sleep(0)
    assert len(asked) == 1


async def test_a_secret_read_given_up_by_the_receiver_is_cancelled_on_the_controller_s_loop() -> (
    None
):
    main = asyncio.get_running_loop()
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def read(where: SecretLocation) -> bytes:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return SECRET

    there = on_loop(main, read)

    def receiver_side() -> None:
        async def give_up() -> None:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(there(HOOK), 0.2)

        asyncio.run(give_up())

    await asyncio.to_thread(receiver_side)
    assert started.is_set()
    await asyncio.wait_for(cancelled.wait(), 2)


async def test_evidence_handed_to_a_held_controller_loop_is_bounded_wakes_are_not() -> None:
    main = asyncio.get_running_loop()
    controller = Controller()
    port = port_over(controller, main)

    def flood() -> None:  # the receiver's side: a tenant's flood of signed deliveries
        for n in range(webhook_port.HANDED_AT_MOST + 500):
            port.heard("team-a/ci", n)
        for _ in range(10):
            port.wake("team-a/ci")

    sender = threading.Thread(target=flood)
    sender.start()
    sender.join()  # the controller's loop is held meanwhile: it takes nothing
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(controller.heard_for) == webhook_port.HANDED_AT_MOST
    assert len(controller.woken) == 10
    # Taken, the place is free again.
    await asyncio.to_thread(port.heard, "team-a/ci", -1)
    await asyncio.sleep(0)
    assert controller.heard_for[-1][:2] == ("team-a/ci", -1)


async def test_a_receiver_whose_thread_ended_makes_healthz_fail_so_the_pod_restarts() -> None:
    # Before, /healthz answered "ok" with the receiver's thread gone: every delivery went
    # unanswered (Gitea saw connections refused) while the controller polled on, and the
    # kubelet had no reason to restart the operator.
    port = port_over(Controller(), asyncio.get_running_loop())
    receiver = ReceiverThread(WebhookServer("127.0.0.1", 0, port))
    await receiver.start()
    health_port = free_port()
    health = HealthServer("127.0.0.1", health_port, lambda: True, live=receiver.problem)
    await health.start()
    try:
        async with aiohttp.ClientSession() as session:
            assert await _status(session, health_port) == 200
            loop = receiver._loop
            assert loop is not None
            loop.call_soon_threadsafe(loop.stop)  # its loop ends, nobody stopped it
            await asyncio.to_thread(receiver._thread.join, 5)  # type: ignore[union-attr]
            assert receiver.problem() == "the webhook receiver's thread ended"
            assert await _status(session, health_port) == 503
        await receiver.stop()
        assert receiver.problem() is None  # stopped on purpose: nothing to restart for
    finally:
        await health.stop()


async def _status(session: aiohttp.ClientSession, port: int) -> int:
    async with session.get(f"http://127.0.0.1:{port}/healthz") as resp:
        await resp.read()
        return resp.status
