"""Gitea's answers for unit tests of the observers, played by aioresponses: an org scope's
queued jobs and runners, and the Secret store that hands out its token."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from aioresponses import aioresponses

from tests.support.builders import VALID

ORG_SPEC = {**VALID, "scope": "org", "repo": None, "gitea": {"url": "http://g.test"}}
ORG_SPEC = {k: v for k, v in ORG_SPEC.items() if v is not None}
JOBS = re.compile(r"^http://g\.test/api/v1/orgs/acme/actions/jobs\?.*$")
QUEUED = re.compile(r"^http://g\.test/api/v1/orgs/acme/actions/jobs\?.*status=queued.*$")
RUNNERS = re.compile(r"^http://g\.test/api/v1/orgs/acme/actions/runners\?.*$")


class FakeSecrets:
    def __init__(self, tokens: dict[str, str]) -> None:
        self.tokens = tokens  # namespace -> token

    async def read(self, namespace: str, name: str, key: str, field: str, url: str) -> str:
        return self.tokens[namespace]

    def invalidate(self, namespace: str, name: str) -> None:
        pass


def is_gitea(mock: aioresponses) -> None:
    """What a Gitea answers to the forge detection: Forgejo's own endpoint is not routed."""
    mock.get("http://g.test/api/forgejo/v1/version", status=404, repeat=True)
    mock.get("http://g.test/api/v1/version", payload={"version": "1.27.3"}, repeat=True)


def gitea(mock: aioresponses, delay: float = 0.0) -> None:
    is_gitea(mock)
    mock.get("http://g.test/api/v1/orgs/acme", payload={"id": 1}, repeat=True)

    async def slow(*_: Any, **__: Any) -> None:
        await asyncio.sleep(delay)

    mock.get(RUNNERS, payload={"runners": [], "total_count": 0}, repeat=True, callback=slow)
    mock.get(JOBS, payload={"jobs": [], "total_count": 0}, repeat=True)
