"""A raw answer of the Kubernetes API, as kubernetes_asyncio hands it over with
``_preload_content=False``: what the write path (kube/http.py) reads of a response."""

from __future__ import annotations


class FakeResponse:
    def __init__(self, status: int, body: bytes = b"{}", headers: dict[str, str] | None = None):
        self.status, self.reason, self._body = status, "x", body
        self.headers = headers or {}

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        pass
