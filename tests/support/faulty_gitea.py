"""A loopback HTTP front for the testbed's Gitea that can misbehave on demand.

Mode ``proxy`` forwards every request to the real Gitea (also when it is used as a forward
proxy, with the whole URL in the request line); ``500`` and ``429`` answer with
that status (429 with ``Retry-After``); ``hang`` accepts the connection and never answers;
``redirect`` answers 302 to a path of its own (to prove nobody follows it);
``huge`` answers 200 with a body of ``huge_mib`` MiB (200 by default), streamed without a
Content-Length in 1 MiB writes, and stops by itself at that size or when the client hangs
up; ``forbid-deletes`` forwards everything but answers 403 to every DELETE (Gitea refusing to
remove a runner or a hook). Every request is
recorded (method, path, whether it carried an Authorization header), so tests can prove that
*nothing* was sent. Real Gitea cannot be made to fail like this on demand; the operator
under test is real, and so is the Gitea behind the proxy."""

from __future__ import annotations

import contextlib
import ssl
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# The front talks to the real Gitea directly, whatever proxy the test's environment names.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    authorized: bool


class FaultyGitea:
    def __init__(
        self,
        upstream: str | None = None,
        mode: str = "proxy",
        tls: tuple[str, str] | None = None,
    ) -> None:
        """``tls`` = (certificate file, key file): serve HTTPS with that certificate."""
        self.upstream = upstream.rstrip("/") if upstream else None
        self.mode = mode
        self.retry_after = 30
        self.huge_mib = 200
        self.huge_sent = 0  # bytes of huge bodies actually written (the client hung up early)
        self.requests: list[Seen] = []
        self._release = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _handle(self) -> None:
                owner.requests.append(
                    Seen(self.command, self.path, "Authorization" in self.headers)
                )
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                mode = owner.mode
                if mode == "hang":
                    owner._release.wait()
                    return
                if mode == "huge":
                    self._huge()
                    return
                if mode == "forbid-deletes" and self.command == "DELETE":
                    self._reply(403, b'{"message":"forbidden"}')
                elif mode == "redirect":
                    self._reply(302, b"", {"Location": f"{owner.url}/stolen"})
                elif mode == "500":
                    self._reply(500, b'{"message":"internal error"}')
                elif mode == "429":
                    self._reply(429, b"{}", {"Retry-After": str(owner.retry_after)})
                elif mode in ("proxy", "forbid-deletes") and owner.upstream:
                    self._forward(body)
                else:
                    self._reply(200, b"{}")

            def _forward(self, body: bytes | None) -> None:
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() in ("authorization", "accept", "content-type")
                }
                # A forward-proxy request names the whole URL; a plain one only the path.
                absolute = self.path.startswith(("http://", "https://"))
                target = self.path if absolute else f"{owner.upstream}{self.path}"
                req = urllib.request.Request(
                    target, data=body, headers=headers, method=self.command
                )
                try:
                    with _DIRECT.open(req, timeout=30) as resp:
                        status, payload = resp.status, resp.read()
                        extra = {
                            k: v for k, v in resp.headers.items() if k.lower() == "x-total-count"
                        }
                except urllib.error.HTTPError as err:
                    status, payload, extra = err.code, err.read(), {}
                self._reply(status, payload, extra)

            def _huge(self) -> None:
                self.close_connection = True
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Connection", "close")
                self.end_headers()
                chunk = b"[" + b"0," * (512 * 1024 - 1) + b"0"  # ~1 MiB, never closed
                for _ in range(owner.huge_mib):  # bounded: stops by itself
                    try:
                        self.wfile.write(chunk)
                    except OSError:
                        return  # the client stopped reading: what a bounded reader does
                    owner.huge_sent += len(chunk)

            def _reply(
                self, status: int, body: bytes, headers: dict[str, str] | None = None
            ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(body)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _handle  # noqa: N815

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FaultyGitea:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
