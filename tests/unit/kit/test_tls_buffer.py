"""A TLS connection of the operator holds a small read buffer, not asyncio's 256 KiB: with a
watch per namespace and kind, hundreds of connections made that 40 MB of RSS (Memory in
docs/benchmarks.md). Large answers still arrive whole."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import tracemalloc
from pathlib import Path

from gitea_runner_operator.kit.frugal import bound_process_memory

BODY = bytes(range(256)) * 4096  # 1 MiB


def tls_contexts(tmp: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    key, cert = tmp / "k.pem", tmp / "c.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cafile=cert)
    client.check_hostname = False
    return server, client


async def test_tls_connections_cost_little_memory_and_read_large_answers_whole(tmp_path):
    bound_process_memory()  # as the operator's entry point does
    server_ctx, client_ctx = tls_contexts(tmp_path)
    release = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(BODY)
        await writer.drain()
        await release.wait()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    conns, opened = 20, []
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(conns):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
            assert await reader.readexactly(len(BODY)) == BODY
            opened.append(writer)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        release.set()
        for writer in opened:
            writer.close()
        server.close()
        await server.wait_closed()
    # both ends of each connection are in this process: 2 x 20 buffers (was 256 KiB each)
    assert held / (2 * conns) < 100 * 1024
