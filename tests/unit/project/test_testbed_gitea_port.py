"""The testbed's Gitea answers the tests only from its own server: when another sandbox (an
xdist worker's) took its port first and runs a Gitea there, the tests must not be handed
that one, which knows none of this sandbox's tokens (a full run once failed five setups on
``POST /orgs -> 401 token is required``). A stand-in ``gitea`` executable plays both."""

from __future__ import annotations

import http.server
import json
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.testbed import sandbox as sandbox_module
from tests.testbed.gitea_api import GiteaAPI
from tests.testbed.sandbox import Sandbox, free_port

TOKEN = "0123456789abcdef0123456789abcdef01234567"

# The setup commands print a token (generate-access-token --raw); ``web --port P`` binds P
# or exits as Gitea does, and knows only TOKEN.
STAND_IN = textwrap.dedent(
    f"""\
    import http.server, json, sys
    args = sys.argv[1:]
    if "web" not in args:
        if "generate-access-token" in args:
            print("{TOKEN}")
        sys.exit(0)
    port = int(args[args.index("--port") + 1])

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ours = self.headers.get("Authorization") == "token {TOKEN}"
            if self.path == "/api/v1/version":
                status, body = 200, {{"version": "1.25.5"}}
            elif ours:
                status, body = 200, {{"login": "gro-admin"}}
            else:
                status, body = 401, {{"message": "token is required"}}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    try:
        server = http.server.HTTPServer(("127.0.0.1", port), Handler)
    except OSError:
        print(f"listen tcp 127.0.0.1:{{port}}: bind: address already in use", flush=True)
        sys.exit(1)
    server.serve_forever()
    """
)


class OtherGitea(http.server.BaseHTTPRequestHandler):
    """Another sandbox's Gitea: up, and a stranger to this sandbox's token."""

    def do_GET(self) -> None:
        status, body = (200, {"version": "1.27.3"}) if self.path == "/api/v1/version" else (
            401, {"message": "token is required"})  # fmt: skip
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def other_gitea() -> Iterator[int]:
    server = http.server.HTTPServer(("127.0.0.1", free_port()), OtherGitea)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_a_port_another_gitea_took_meanwhile_is_left_and_the_own_server_answers(
    tmp_path: Path, other_gitea: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in = tmp_path / "gitea"
    stand_in.write_text(f"#!{sys.executable}\n{STAND_IN}")
    stand_in.chmod(0o755)
    sb = Sandbox(kube="none", workdir=tmp_path / "sandbox")

    def chosen() -> int:  # the port the other Gitea holds, until a bind to it was lost
        lost = "address already in use" in sb.log_tail("gitea")
        return free_port() if lost else other_gitea

    monkeypatch.setattr(sandbox_module, "free_port", chosen)
    sb.logs_dir.mkdir(parents=True)
    sb.bin["gitea"] = stand_in
    sb._gitea_static = tmp_path
    try:
        sb._start_gitea()
        assert sb.gitea_url and sb.gitea_token == TOKEN
        assert not sb.gitea_url.endswith(f":{other_gitea}")
        user = GiteaAPI(sb.gitea_url, sb.gitea_token).request("GET", "/user")
        assert user == {"login": "gro-admin"}  # what POST /orgs met was the other one
        assert "address already in use" in sb.log_tail("gitea")
    finally:
        sb.stop()
