"""``/healthz`` (the event loop answers, and what else must live does: the webhook receiver's
thread), ``/readyz`` (caches synced, or standing by for
leadership), for the Deployment's probes, and ``/metrics`` for Prometheus on the same port,
so a scrape needs no second port or Service. ``/metrics`` answers a body rendered at most
once per ``render_every`` seconds, off the loop (``metrics/exposition.py``), and with
``metrics_access`` only to a bearer token the API server allows (``kube/reviews.py``); the
probes stay open, since the kubelet sends no token."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import structlog
from aiohttp import web

from gitea_runner_operator.kit.lograte import LogRate
from gitea_runner_operator.kube.reviews import OK, UNAUTHENTICATED, MetricsAccess
from gitea_runner_operator.metrics import CONTENT_TYPE, Metrics
from gitea_runner_operator.metrics.exposition import RENDER_EVERY, SharedRender

log = structlog.get_logger(__name__)

REFUSALS: Final = {
    401: "a bearer token the API server vouches for is required\n",
    403: "this identity may not get /metrics\n",
    429: "too many unknown tokens; try again later\n",
    503: "the API server could not review the token\n",
}
REFUSAL_LOG_EVERY: Final = 60.0


class HealthServer:
    def __init__(
        self,
        host: str,
        port: int,
        ready: Callable[[], bool],
        metrics: Metrics | None = None,
        render_every: float = RENDER_EVERY,
        metrics_access: MetricsAccess | None = None,
        live: Callable[[], str | None] = lambda: None,
    ) -> None:
        self._host = host
        self._live = live  # why the process must be restarted (None: it need not)
        self._port = port
        self._ready = ready
        self._metrics = SharedRender(metrics.render, render_every) if metrics else None
        self._access = metrics_access
        self._refusals = LogRate(REFUSAL_LOG_EVERY)
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        if self._metrics is not None:
            app.router.add_get("/metrics", self._metrics_text)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self._host, self._port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _healthz(self, _: web.Request) -> web.Response:
        problem = self._live()
        if problem is None:
            return web.Response(text="ok\n")
        held = self._refusals.admit("healthz")
        if held is not None:
            log.error("not healthy: the kubelet restarts the operator", problem=problem)
        return web.Response(status=503, text=f"not healthy: {problem}\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        if self._ready():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="not ready\n")

    async def _metrics_text(self, request: web.Request) -> web.Response:
        assert self._metrics is not None
        if self._access is not None:
            status = await self._access.check(request.headers.get("Authorization"))
            if status != OK:
                return self._refused(status, request.remote)
        body = await self._metrics.body()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    def _refused(self, status: int, remote: str | None) -> web.Response:
        held = self._refusals.admit(status)
        if held is not None:
            log.info("metrics scrape refused", status=status, remote=remote, held_back=held)
        headers = (
            {"WWW-Authenticate": 'Bearer realm="metrics"'} if status == UNAUTHENTICATED else {}
        )
        return web.Response(status=status, text=REFUSALS[status], headers=headers)
