"""The operator's Kubernetes API clients, opened one way.

kubernetes_asyncio's client makes its aiohttp session with ``trust_env=True``, so every
request (a runner create, a status patch, a Lease read) first looks the proxy and a netrc
file up in a thread of the loop's default executor, then comes back to the event loop: two
hops that each wait for a turn of the loop. Under issue 45's attacks those turns were busy,
on the way of every runner create. Where the environment names no proxy for the API server
(kit/proxies.py, the rule the Gitea sessions follow), the session does not look again;
where it does, the proxy is honoured as before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from kubernetes_asyncio import client

from gitea_runner_operator.kit.proxies import proxied


def skip_env_lookups(api: client.ApiClient) -> bool:
    """Have ``api``'s session skip the per-request proxy and netrc lookups when no proxy
    applies to its API server. aiohttp takes ``trust_env`` only when a session is made, and
    kubernetes_asyncio makes it; so its attribute is set here (a test fails if aiohttp
    renames it). Whether it was skipped."""
    session = api.rest_client.pool_manager
    if proxied(api.configuration.host or "") or not hasattr(session, "_trust_env"):
        return False
    session._trust_env = False
    return True


@asynccontextmanager
async def api_client(config: client.Configuration | None = None) -> AsyncIterator[client.ApiClient]:
    """An API client (the default configuration's without ``config``), closed on exit."""
    async with client.ApiClient(config) as api:
        skip_env_lookups(api)
        yield api
