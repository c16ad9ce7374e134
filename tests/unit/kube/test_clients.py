"""The operator's Kubernetes clients (kube/clients.py): a request to an API server that no
proxy setting covers makes no hop through a thread for the environment's proxy and netrc
(two turns of a busy loop on the way of every runner create); one a proxy covers still goes
through it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from kubernetes_asyncio import client

from gitea_runner_operator.kube.clients import api_client


@pytest.fixture
async def api_server() -> AsyncIterator[TestServer]:
    async def namespace(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        return web.json_response({"kind": "Namespace", "metadata": {"name": name}})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{name}", namespace)
    server = TestServer(app)
    await server.start_server()
    yield server
    await server.close()


def _config(server: TestServer) -> client.Configuration:
    config = client.Configuration()
    config.host = str(server.make_url("")).rstrip("/")
    return config


async def _threads_per_request(
    server: TestServer, monkeypatch: pytest.MonkeyPatch, requests: int = 5
) -> int:
    """Work the client sent to a thread while making ``requests`` requests."""
    hops = 0
    loop = asyncio.get_running_loop()
    real = loop.run_in_executor

    def counted(*args: object) -> object:
        nonlocal hops
        hops += 1
        return real(*args)  # type: ignore[arg-type]

    real_to_thread = asyncio.to_thread

    async def to_thread(*args: object, **kwargs: object) -> object:
        nonlocal hops
        hops += 1
        return await real_to_thread(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(loop, "run_in_executor", counted)
    monkeypatch.setattr(asyncio, "to_thread", to_thread)
    async with api_client(_config(server)) as api:
        core = client.CoreV1Api(api)
        for k in range(requests):
            got = await core.read_namespace(f"team-{k}")
            assert got.metadata.name == f"team-{k}"
    return hops


async def test_a_request_no_proxy_covers_makes_no_hop_through_a_thread(
    api_server: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert await _threads_per_request(api_server, monkeypatch) == 0


async def test_an_api_server_named_in_no_proxy_is_reached_without_lookups(
    api_server: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    assert await _threads_per_request(api_server, monkeypatch) == 0


async def test_a_proxy_that_covers_the_api_server_is_still_looked_up(
    api_server: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The environment's proxy applies: the session keeps asking it (here it names the
    test server itself as the proxy, so the request still arrives)."""
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    proxy = str(api_server.make_url("")).rstrip("/")
    monkeypatch.setenv("HTTP_PROXY", proxy)
    async with api_client(_config(api_server)) as api:
        assert api.rest_client.pool_manager.trust_env
