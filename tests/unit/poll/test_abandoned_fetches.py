"""Abandoned work is cancelled and awaited, never left to fail on its own.

Against a real loopback server that accepts connections and never answers (the shape of the
review's probe: 8 groups on such URLs each left a fetch behind, which later crashed on a
closed HTTP session with ``Task exception was never retrieved`` and aiohttp's
``AssertionError``). The event loop's exception handler records anything left unretrieved;
it must stay empty."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gitea_runner_operator.api.runnergroup import parse_spec
from gitea_runner_operator.forge.client import SessionPool
from gitea_runner_operator.poll.observer import Observer
from tests.support.builders import VALID
from tests.support.gitea_answers import FakeSecrets


@pytest.fixture
async def tarpit() -> AsyncIterator[str]:
    """Answers the forge detection (Gitea's version; 404 for Forgejo's), then accepts every
    other request and never answers it."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readline()
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        path = request.split()[1] if len(request.split()) > 1 else b""
        if path.startswith(b"/api/v1/version") or path.startswith(b"/api/forgejo/v1/version"):
            found = path.startswith(b"/api/v1/version")
            body = b'{"version": "1.27.3"}' if found else b"{}"
            status = b"200 OK" if found else b"404 Not Found"
            writer.write(
                b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            await writer.drain()
            writer.close()
            return
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    for writer in held:
        writer.close()
    server.close()
    await server.wait_closed()


def _fetch_tasks() -> list[asyncio.Task[Any]]:
    return [
        t
        for t in asyncio.all_tasks()
        if getattr(t.get_coro(), "__qualname__", "").endswith("ScopeFetcher.fetch")
    ]


def _spec(url: str) -> Any:
    org = {k: v for k, v in {**VALID, "scope": "org", "repo": None}.items() if v is not None}
    return parse_spec({**org, "gitea": {"url": url}, "pollInterval": "5s"})


async def test_a_fetch_nobody_waits_for_is_cancelled_then_sessions_close_cleanly(tarpit):
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    sessions = SessionPool()
    observer = Observer(
        FakeSecrets({f"ns{i}": "t" for i in range(8)}),  # type: ignore[arg-type]
        sessions,
        deadline=0.3,
    )
    spec = _spec(tarpit)
    # Eight groups on the hanging URL; each observation gives up at its deadline.
    results = await asyncio.gather(*(observer.observe(f"ns{i}", spec) for i in range(8)))
    assert all(s.problem is not None and s.problem.reason == "GiteaUnreachable" for s, _ in results)
    # Pollers stopping mid-request: the waiters are cancelled, and so is the fetch.
    waiting = [asyncio.create_task(observer.observe(f"ns{i}", spec)) for i in range(8)]
    for _ in range(200):  # the shared fetch starts after the forge detection (loaded machine)
        await asyncio.sleep(0.025)
        if fetches := _fetch_tasks():
            break
    assert fetches
    for task in waiting:
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
    await asyncio.sleep(0)
    assert not [t for t in observer._tasks if not t.done()]
    # The groups go: their URL is dropped (fetches awaited), then its session closes.
    await observer.drop(set())
    await sessions.retain(set())
    await asyncio.sleep(2)  # long after (measured before: AssertionError within ~1 s)
    assert all(t.done() for t in fetches)
    assert [t.exception() for t in fetches if not t.cancelled()] == [None] * sum(
        1 for t in fetches if not t.cancelled()
    )
    await observer.close()
    await sessions.close()
    gc.collect()
    await asyncio.sleep(0)
    assert seen == []


async def test_closing_cancels_and_awaits_a_fetch_still_in_flight(tarpit):
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    sessions = SessionPool()
    observer = Observer(FakeSecrets({"a": "t"}), sessions, deadline=30)  # type: ignore[arg-type]
    waiter = asyncio.create_task(observer.observe("a", _spec(tarpit)))
    for _ in range(200):  # the fetch starts after the forge detection (loaded machine)
        await asyncio.sleep(0.025)
        if observer._tasks:
            break
    (fetch,) = observer._tasks
    await observer.close()  # shutdown: the fetch is cancelled and awaited
    assert fetch.done()
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    await sessions.close()
    gc.collect()
    await asyncio.sleep(0)
    assert seen == []
