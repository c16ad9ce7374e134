"""HTTP sessions to Gitea keep no cookies: a cookie Gitea set for one tenant's token must
never ride along on another tenant's request. A real loopback server sets one."""

from __future__ import annotations

from aiohttp import web

from gitea_runner_operator.forge.client import SessionPool


async def test_a_cookie_set_by_gitea_is_never_sent_back():
    seen: list[str | None] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Cookie"))
        response = web.json_response({})
        response.set_cookie("i_like_gitea", "tenant-a-session")
        return response

    app = web.Application()
    app.router.add_get("/api/v1/version", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "localhost", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    url = f"http://localhost:{port}"  # a host name: cookie jars refuse IP-address hosts
    pool = SessionPool()
    try:
        session = pool.session_for(url)
        for _ in range(2):
            async with session.get(f"{url}/api/v1/version") as resp:
                assert "i_like_gitea" in resp.headers.get("Set-Cookie", "")
    finally:
        await pool.close()
        await runner.cleanup()
    assert seen == [None, None]


async def test_the_proxy_environment_is_honoured_and_read_once_per_session(monkeypatch):
    """Without a proxy for its URL a session does not look the environment up again on every
    request (a thread hop per request); with one it goes through it, and NO_PROXY wins."""
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    pool = SessionPool()
    try:
        assert not pool.session_for("https://gitea.example").trust_env
        monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
        monkeypatch.setenv("NO_PROXY", "internal.example")
        assert pool.session_for("https://gitea2.example").trust_env
        assert not pool.session_for("https://git.internal.example").trust_env
    finally:
        await pool.close()
