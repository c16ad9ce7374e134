"""A forge answer is bounded by what it parses into, not only by its bytes: a page of tiny
objects is refused before it is parsed, a page holds at most its page size, one observation
reads and keeps a bounded amount over all its pages (Forgejo's unpaged job list included),
and big answers are parsed off the event loop. Past a bound the group says
``GiteaAnswerTooLarge``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
import threading
import tracemalloc

import aiohttp
import pytest
from aioresponses import aioresponses

from gitea_runner_operator.api.runnergroup import Scope, parse_spec
from gitea_runner_operator.forge import limits
from gitea_runner_operator.forge.client import GiteaClient, SessionPool
from gitea_runner_operator.forge.errors import GiteaAnswerTooLarge
from gitea_runner_operator.forge.forgejo import ForgejoClient
from gitea_runner_operator.forge.hooks import HookClient
from gitea_runner_operator.forge.limits import AnswerBudget
from gitea_runner_operator.forge.scope import ScopeRef
from gitea_runner_operator.kit.priority import PICKUPS
from gitea_runner_operator.poll.observer import Observer
from tests.support.gitea_answers import JOBS, ORG_SPEC, RUNNERS, FakeSecrets, is_gitea

BASE = "http://gitea.test"
REPO = ScopeRef(Scope.REPO, "acme", "widgets")
REPO_RUNNERS = re.compile(r"^http://gitea\.test/api/v1/repos/acme/widgets/actions/runners\?.*$")
FORGEJO_JOBS = re.compile(r"^http://gitea\.test/api/v1/repos/acme/widgets/actions/runners/jobs")


def runners(count: int) -> dict[str, object]:
    return {
        "runners": [{"id": i, "name": f"r{i}", "status": "online"} for i in range(count)],
        "total_count": 10_000,
    }


@pytest.fixture
async def session():
    async with aiohttp.ClientSession() as s:
        yield s


async def test_a_page_of_tiny_objects_is_refused_before_it_is_parsed(session):
    client = GiteaClient(session, BASE, "tok", attempts=1)
    body = b'{"runners":[' + b",".join([b"{}"] * 1_000_000) + b'],"total_count":1}'
    with aioresponses() as mock:
        mock.get(REPO_RUNNERS, status=200, body=body)
        tracemalloc.start()
        try:
            with pytest.raises(GiteaAnswerTooLarge) as err:
                await client.list_runners(REPO)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert err.value.reason == "GiteaAnswerTooLarge" and "JSON values" in str(err.value)
    # 3 MB of bytes, copied a few times; parsed, it was 1,000,000 dicts (over 100 MB).
    assert peak < 32 * 1024 * 1024


async def test_a_page_holds_at_most_its_page_size(session):
    client = GiteaClient(session, BASE, "tok", attempts=1, page_size=50)
    with aioresponses() as mock:
        mock.get(REPO_RUNNERS, payload=runners(51))
        with pytest.raises(GiteaAnswerTooLarge, match="holds 51 items, more than the 50"):
            await client.list_runners(REPO)


async def test_a_page_of_hooks_holds_at_most_its_page_size(session):
    client = GiteaClient(session, BASE, "tok", attempts=1)
    hooks = [{"id": i, "config": {"url": "http://x"}} for i in range(51)]
    with aioresponses() as mock:
        mock.get(re.compile(r"^http://gitea\.test/api/v1/orgs/acme/hooks\?.*$"), payload=hooks)
        with pytest.raises(GiteaAnswerTooLarge, match="holds 51 items"):
            await HookClient(client.call).list_hooks(ScopeRef(Scope.ORG, "acme"))


async def test_forgejos_unpaged_job_list_is_bounded_by_the_observation_budget(session):
    jobs = [{"id": i, "status": "waiting", "runs_on": ["docker"]} for i in range(1, 102)]
    client = ForgejoClient(session, BASE, "tok", attempts=1).metered(AnswerBudget(max_items=100))
    with aioresponses() as mock:
        mock.get(FORGEJO_JOBS, payload=jobs)
        with pytest.raises(GiteaAnswerTooLarge, match="more than 100 runners and jobs"):
            await client.list_forgejo_jobs(REPO)


@pytest.mark.parametrize("budget", [{"max_answer_items": 120}, {"max_answer_bytes": 20_000}])
async def test_an_observation_past_its_budget_reports_gitea_answer_too_large(budget):
    pool = SessionPool()
    observer = Observer(FakeSecrets({"a": "t1"}), pool, **budget)  # type: ignore[arg-type]
    try:
        with aioresponses() as mock:
            is_gitea(mock)
            mock.get("http://g.test/api/v1/orgs/acme", payload={"id": 1}, repeat=True)
            # Every page is a fine page of 50; there are just too many of them.
            mock.get(RUNNERS, payload=runners(50), repeat=True)
            mock.get(JOBS, payload={"jobs": [], "total_count": 0}, repeat=True)
            snapshot, handle = await observer.observe("a", parse_spec(ORG_SPEC))
    finally:
        await pool.close()
    assert snapshot.problem is not None and snapshot.problem.reason == "GiteaAnswerTooLarge"
    assert snapshot.observation is None and handle is None


async def test_a_big_answer_is_parsed_off_the_event_loop(session, monkeypatch):
    threads: list[str] = []
    parse = limits.parse

    def recording(body: bytes, where: str) -> object:
        threads.append(threading.current_thread().name)
        return parse(body, where)

    monkeypatch.setattr(limits, "parse", recording)
    client = GiteaClient(session, BASE, "tok", attempts=1)
    big = runners(50)
    big["runners"][0]["name"] = "x" * (limits.OFF_LOOP_BYTES + 1)  # type: ignore[index]
    with aioresponses() as mock:
        mock.get(f"{BASE}/api/v1/version", payload={"version": "1.27.3"})
        mock.get(f"{BASE}/api/v1/version", body=json.dumps(big))
        await client.call("GET", "/api/v1/version")
        await client.call("GET", "/api/v1/version")
    main = threading.current_thread().name
    assert threads[0] == main and threads[1] != main


async def test_heavy_answers_take_turns_of_the_loop_and_a_small_one_never_waits() -> None:
    """Twelve pages of many jobs that arrived together are parsed one per turn of the loop,
    so another tenant's answer that arrives meanwhile is read between two (kit/turnstile.py);
    a healthy poll's few KiB pass at once."""
    page = json.dumps({"jobs": [{"id": i, "labels": ["x" * 45] * 8} for i in range(50)]})
    assert len(page) > limits.HEAVY_BYTES
    waited = limits.HEAVY_ANSWERS.waited
    small = json.dumps({"jobs": [], "total_count": 0}).encode()
    values = await asyncio.gather(
        *(limits.decode(page.encode(), "GET page") for _ in range(12)),
        limits.decode(small, "GET small"),
    )
    assert len(values) == 13 and values[-1] == {"jobs": [], "total_count": 0}
    assert limits.HEAVY_ANSWERS.waited - waited == 11  # all but the first, none the small one


async def test_a_polls_requests_and_answers_make_way_for_another_tenants_pickup() -> None:
    """While a delivery's pickup is under way (kit/priority.py), a poll nobody woke neither
    sends its next request nor parses an answer that lands meanwhile; the woken group's own
    observation, and its tenant's, do both at once."""
    body = json.dumps({"version": "1.27.3"}).encode()
    session = aiohttp.ClientSession()
    client = GiteaClient(session, BASE, "tok", attempts=1)
    polled = client.metered(AnswerBudget(10_000_000, 1_000_000), contextlib.nullcontext, "evil")
    PICKUPS.begin("team-a/ci", "team-a")
    try:
        with aioresponses() as mock:
            mock.get(f"{BASE}/api/v1/version", body=body)
            request = asyncio.ensure_future(polled.call("GET", "/api/v1/version"))
            parse = asyncio.ensure_future(limits.decode(body, "GET /version", "evil"))
            await asyncio.sleep(0.03)
            assert not request.done() and not parse.done()
            assert not mock.requests  # the poll's request has not left
            with PICKUPS.urgent():
                assert await limits.decode(body, "GET /version", "evil") == {"version": "1.27.3"}
            assert await limits.decode(body, "GET /version", "team-a") == {"version": "1.27.3"}
            PICKUPS.passed("team-a/ci", started=math.inf)  # the woken group's pass ended
            assert await asyncio.wait_for(parse, 1) == {"version": "1.27.3"}
            assert await asyncio.wait_for(request, 1) == {"version": "1.27.3"}
    finally:
        PICKUPS.passed("team-a/ci", started=math.inf)
        await session.close()
