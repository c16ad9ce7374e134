"""Helpers of the forwarding tests (--sharding): peers on loopback that answer as told,
and a wait for a forwarder's forwards to end."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress

from gitea_runner_operator.webhook.forwarding import Forwarder

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def settled(forwarder: Forwarder, within: float = 5.0) -> float:
    """Seconds until no forward is under way."""
    started = time.monotonic()
    while len(forwarder):
        assert time.monotonic() - started < within, "forwards still under way"
        await asyncio.sleep(0.01)
    return time.monotonic() - started


@asynccontextmanager
async def raw_peer(handler: Handler) -> AsyncIterator[str]:
    """A TCP peer on loopback that does what ``handler`` does with each connection."""
    writers: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        with suppress(ConnectionError, asyncio.CancelledError):
            await handler(reader, writer)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        for writer in writers:
            writer.close()


async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read(1 << 16)
    await asyncio.sleep(3600)
