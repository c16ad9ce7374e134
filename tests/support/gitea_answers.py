"""Gitea's answers for unit tests of the observers, played by aioresponses: an org scope's
queued jobs and runners, and the Secret store that hands out its token."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from aioresponses import aioresponses

from gitea_runner_operator.api.runnergroup import RunnerGroupSpec, parse_spec
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


EVIL = "http://evil.test"
EVIL_JOBS = re.compile(r"^http://evil\.test/api/v1/orgs/evil\d/actions/jobs\?.*$")
EVIL_RUNNERS = re.compile(r"^http://evil\.test/api/v1/orgs/evil\d/actions/runners\?.*$")
EVIL_ORG = re.compile(r"^http://evil\.test/api/v1/orgs/evil\d$")


def evil_page() -> bytes:
    """A page of 50 queued jobs with 64 labels of 45 characters each: within every cap."""
    jobs = [
        {
            "id": i,
            "status": "queued",
            "labels": [f"{i:04d}-{k:02d}-".ljust(45, "x") for k in range(64)],
            "url": f"{EVIL}/api/v1/repos/evil/app/actions/jobs/{i}",
        }
        for i in range(1, 51)
    ]
    return json.dumps({"jobs": jobs, "total_count": 10_000}).encode()


def evil_gitea(mock: aioresponses) -> None:
    """A hostile Gitea at http://evil.test: organisations evil0, evil1, ..., each listing
    10,000 queued jobs, every page :func:`evil_page`."""
    mock.get(f"{EVIL}/api/forgejo/v1/version", status=404, repeat=True)
    mock.get(f"{EVIL}/api/v1/version", payload={"version": "1.27.3"}, repeat=True)
    mock.get(EVIL_ORG, payload={"id": 1}, repeat=True)
    mock.get(EVIL_RUNNERS, payload={"runners": [], "total_count": 0}, repeat=True)
    mock.get(EVIL_JOBS, body=evil_page(), repeat=True)


def evil_spec(n: int) -> RunnerGroupSpec:
    return parse_spec({**ORG_SPEC, "org": f"evil{n}", "gitea": {"url": EVIL}})
