"""``/healthz`` (the event loop answers) and ``/readyz`` (caches synced, or standing by for
leadership), for the Deployment's probes."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web


class HealthServer:
    def __init__(self, host: str, port: int, ready: Callable[[], bool]) -> None:
        self._host = host
        self._port = port
        self._ready = ready
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self._host, self._port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        if self._ready():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="not ready\n")
