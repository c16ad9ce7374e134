"""A job or runner past a per-item cap (labels per job, label length, URL length, names,
handles) is refused in the answer, counted and logged once per cause and Gitea; the jobs
beside it are kept (issue 36, rows 2 and 3)."""

from __future__ import annotations

import re

import aiohttp
import pytest
import structlog
from aioresponses import aioresponses

from gitea_runner_operator.api import caps
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.forge import refusals
from gitea_runner_operator.forge.client import GiteaClient
from gitea_runner_operator.forge.forgejo import ForgejoClient
from gitea_runner_operator.forge.scope import ScopeRef

BASE = "http://gitea.test"
REPO = ScopeRef(Scope.REPO, "acme", "widgets")
JOBS = re.compile(r"^http://gitea\.test/api/v1/repos/acme/widgets/actions/jobs\?.*$")
RUNNERS = re.compile(r"^http://gitea\.test/api/v1/repos/acme/widgets/actions/runners\?.*$")
FORGEJO_JOBS = re.compile(r"^http://gitea\.test/api/v1/repos/acme/widgets/actions/runners/jobs")
URL = f"{BASE}/api/v1/repos/acme/widgets/actions/jobs/"


def job(i: int, **changes: object) -> dict[str, object]:
    return {"id": i, "status": "queued", "labels": ["ubuntu"], "url": f"{URL}{i}", **changes}


HOSTILE = [
    job(2, labels=[f"l{n}" for n in range(5_900)]),
    job(3, labels=["x" * (caps.JOB_LABEL_MAX_CHARS + 1)]),
    job(4, url=URL + "4" * 500_000),
    job(5, name="n" * 10_000),
    job(6, handle="h" * 10_000),
]


@pytest.fixture(autouse=True)
def fresh_refusals():
    refusals.REFUSALS.clear()


@pytest.fixture
async def session():
    async with aiohttp.ClientSession() as s:
        yield s


async def test_jobs_past_a_cap_are_refused_and_the_rest_kept(session):
    client = GiteaClient(session, BASE, "tok", attempts=1)
    with aioresponses() as mock, structlog.testing.capture_logs() as logs:
        mock.get(JOBS, payload={"jobs": [job(1), *HOSTILE, job(7)], "total_count": 7})
        listing = await client.list_jobs(REPO)
    assert [j.id for j in listing.items] == [1, 7]
    assert client.refused == len(HOSTILE)
    lines = [e for e in logs if e["event"] == "forge answer item refused"]
    assert sorted(e["cause"] for e in lines) == [
        "handle: too long",
        "labels.0: too long",
        "labels: too long",
        "name: too long",
        "url: too long",
    ]
    assert all(e["gitea"] == BASE for e in lines)


async def test_a_cause_is_logged_once_per_interval_with_a_count_of_the_rest(session):
    with structlog.testing.capture_logs() as logs:
        for _ in range(5):
            client = GiteaClient(session, BASE, "tok", attempts=1)
            with aioresponses() as mock:
                mock.get(JOBS, payload={"jobs": [job(1), HOSTILE[0]], "total_count": 2})
                await client.list_jobs(REPO)
    lines = [e for e in logs if e["event"] == "forge answer item refused"]
    assert len(lines) == 1
    assert refusals.REFUSALS.suppressed(BASE, "labels: too long") == 4


async def test_runners_past_a_cap_are_refused(session):
    client = GiteaClient(session, BASE, "tok", attempts=1)
    many = [{"name": f"l{n}"} for n in range(caps.RUNNER_LABELS_MAX + 1)]
    page = {
        "runners": [
            {"id": 1, "name": "ok", "labels": [{"name": "ubuntu"}]},
            {"id": 2, "name": "many", "labels": many},
            {"id": 3, "name": "r" * 100_000},
        ],
        "total_count": 3,
    }
    with aioresponses() as mock:
        mock.get(RUNNERS, payload=page)
        listing = await client.list_runners(REPO)
    assert [r.id for r in listing.items] == [1]
    assert client.refused == 2


async def test_forgejo_jobs_past_a_cap_are_refused(session):
    jobs = [
        {"id": 1, "status": "waiting", "runs_on": ["docker"]},
        {"id": 2, "status": "waiting", "runs_on": [f"l{n}" for n in range(5_900)]},
    ]
    client = ForgejoClient(session, BASE, "tok", attempts=1)
    with aioresponses() as mock:
        mock.get(FORGEJO_JOBS, payload=jobs)
        listed = await client.list_forgejo_jobs(REPO)
    assert [j.id for j in listed] == [1]
    assert client.refused == 1
