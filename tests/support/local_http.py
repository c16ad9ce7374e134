"""aiohttp applications served on loopback for unit tests: a Gitea that answers slowly, never,
or counts what it is asked, each on a port of its own."""

from __future__ import annotations

from aiohttp import web


class LocalServers:
    """Starts applications on 127.0.0.1 and stops them all at the end of the test."""

    def __init__(self) -> None:
        self._runners: list[web.AppRunner] = []

    async def start(self, app: web.Application) -> str:
        """Serve ``app``; its base URL."""
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runners.append(runner)
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]

    async def close(self) -> None:
        for runner in self._runners:
            await runner.cleanup()
