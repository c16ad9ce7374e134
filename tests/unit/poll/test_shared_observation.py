"""Groups on the same Gitea scope with the same token share one set of requests per poll;
another token never shares (tenant isolation). Gitea is mocked (aioresponses) to count the
requests exactly; the integration suite runs the same code against a real Gitea."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from aioresponses import aioresponses

from gitea_runner_operator.api.runnergroup import parse_spec
from gitea_runner_operator.poll.observer import Observer
from tests.support.gitea_answers import (
    JOBS,
    ORG_SPEC,
    QUEUED,
    RUNNERS,
    FakeSecrets,
    gitea,
    is_gitea,
)


def requests_to(mock: aioresponses, pattern: re.Pattern[str]) -> int:
    return sum(
        len(calls) for (method, url), calls in mock.requests.items() if pattern.match(str(url))
    )


def gitea_with_a_busy_runner(mock: aioresponses) -> None:
    """A scope that lists one busy runner of ours and no queued job."""
    is_gitea(mock)
    mock.get("http://g.test/api/v1/orgs/acme", payload={"id": 1}, repeat=True)
    runner = {"id": 5, "name": "ci-0123abcd-bcdfg-hjklm", "status": "online", "busy": True}
    mock.get(RUNNERS, payload={"runners": [runner], "total_count": 1}, repeat=True)
    mock.get(JOBS, payload={"jobs": [], "total_count": 0}, repeat=True)


async def test_groups_with_the_same_scope_and_token_share_one_request(sessions):
    observer = Observer(FakeSecrets({"a": "t1", "b": "t1"}), sessions)  # type: ignore[arg-type]
    spec = parse_spec(ORG_SPEC)
    with aioresponses() as mock:
        gitea(mock, delay=0.05)
        results = await asyncio.gather(*(observer.observe(ns, spec) for ns in ("a", "b", "a", "b")))
        assert requests_to(mock, QUEUED) == 1 and requests_to(mock, RUNNERS) == 1
    assert all(snapshot.observation is not None for snapshot, _ in results)
    assert observer.fetches == 1


async def test_another_token_never_shares(sessions):
    observer = Observer(FakeSecrets({"a": "t1", "b": "t2"}), sessions)  # type: ignore[arg-type]
    spec = parse_spec(ORG_SPEC)
    with aioresponses() as mock:
        gitea(mock)
        await asyncio.gather(observer.observe("a", spec), observer.observe("b", spec))
        assert requests_to(mock, QUEUED) == 2
    assert observer.fetches == 2


async def test_a_recent_answer_is_reused_unless_a_newer_one_is_asked_for(sessions):
    clock = iter(range(100, 200)).__next__
    observer = Observer(
        FakeSecrets({"a": "t1", "b": "t1"}),  # type: ignore[arg-type]
        sessions,
        clock=lambda: float(clock()),
    )
    spec = parse_spec(ORG_SPEC)
    with aioresponses() as mock:
        gitea(mock)
        first, _ = await observer.observe("a", spec)
        reused, _ = await observer.observe("b", spec, newer_than=first.started_at - 5)
        assert reused.started_at == first.started_at and observer.fetches == 1
        fresh, _ = await observer.observe("b", spec, newer_than=first.started_at + 0.5)
        assert fresh.started_at > first.started_at and observer.fetches == 2


IN_PROGRESS = re.compile(r"^http://g\.test/.*/actions/jobs\?.*status=in_progress.*$")


async def _polls(observer: Observer, now: list[float], steps: tuple[float, ...]) -> None:
    spec = parse_spec(ORG_SPEC)
    for step in steps:
        now[0] = 100.0 + step
        await observer.observe("a", spec, newer_than=now[0])


async def test_running_jobs_are_listed_at_most_once_a_minute_per_scope(sessions):
    now = [100.0]
    observer = Observer(FakeSecrets({"a": "t1"}), sessions, clock=lambda: now[0])  # type: ignore[arg-type]
    with aioresponses() as mock:
        gitea_with_a_busy_runner(mock)
        await _polls(observer, now, (0.0, 10.0, 30.0, 61.0))
        assert requests_to(mock, IN_PROGRESS) == 2  # at 0 s and at 61 s
        assert requests_to(mock, FINISHED) == 2  # likewise
        assert requests_to(mock, QUEUED) == 4


async def test_a_scope_without_runners_is_sampled_once_until_a_runner_is_listed(sessions):
    """No runner listed since the last sample: no runner of ours can have taken a job, so
    the quiet poll costs two requests, not four (1,000 quiet repo groups: 33 a second less)."""
    now = [100.0]
    observer = Observer(FakeSecrets({"a": "t1"}), sessions, clock=lambda: now[0])  # type: ignore[arg-type]
    with aioresponses() as mock:
        gitea(mock)  # no runner, no job
        await _polls(observer, now, (0.0, 61.0, 122.0, 183.0))
        assert requests_to(mock, IN_PROGRESS) == 1  # the first poll's only
        assert requests_to(mock, QUEUED) == 4
    with aioresponses() as mock:
        gitea_with_a_busy_runner(mock)
        await _polls(observer, now, (200.0,))  # a runner is listed: sampled again
        assert requests_to(mock, IN_PROGRESS) == 1 and requests_to(mock, FINISHED) == 1


FINISHED = re.compile(r"^http://g\.test/.*/actions/jobs\?.*status=completed.*$")


def finished_job(job_id: int) -> dict[str, Any]:
    return {
        "id": job_id,
        "status": "completed",
        "runner_id": 3,
        "runner_name": "ci-0123abcd-bcdfg-hjklm",
        "created_at": "2026-11-23T10:00:00Z",
        "started_at": "2026-11-23T10:00:05Z",
        "completed_at": "2026-11-23T10:01:05Z",
    }


@pytest.mark.parametrize(
    ("order", "sampled"),
    [([9, 8, 7], [9, 8, 7]), ([7, 8, 9], [])],
    ids=["newest first (Gitea 1.27)", "oldest first (older Gitea ignores the order)"],
)
async def test_the_newest_finished_jobs_are_sampled_for_the_duration_metric(
    sessions, order, sampled
):
    observer = Observer(FakeSecrets({"a": "t1"}), sessions)  # type: ignore[arg-type]
    spec = parse_spec(ORG_SPEC)
    with aioresponses() as mock:
        is_gitea(mock)
        mock.get("http://g.test/api/v1/orgs/acme", payload={"id": 1}, repeat=True)
        mock.get(RUNNERS, payload={"runners": [], "total_count": 0}, repeat=True)
        mock.get(QUEUED, payload={"jobs": [], "total_count": 0}, repeat=True)
        running = re.compile(r"^http://g\.test/.*/actions/jobs\?.*status=in_progress.*$")
        mock.get(running, payload={"jobs": [], "total_count": 0}, repeat=True)
        jobs = [finished_job(i) for i in order]
        mock.get(FINISHED, payload={"jobs": jobs, "total_count": 3}, repeat=True)
        snapshot, _ = await observer.observe("a", spec)
        (url,) = [str(u) for (_, u) in mock.requests if FINISHED.match(str(u))]
    assert "sort=id" in url and "order=desc" in url
    assert snapshot.observation is not None
    assert [j.id for j in snapshot.observation.finished] == sampled


async def test_caches_of_tokens_no_group_uses_any_more_are_dropped(sessions):
    """Memory follows what is alive: after a token rotation, what the old token resolved and
    fetched goes once nobody has used it for the idle expiry."""
    from gitea_runner_operator.poll.observer import IDLE_EXPIRY

    now = [1000.0]
    secrets = FakeSecrets({"team-a": "old-token"})
    observer = Observer(secrets, sessions, clock=lambda: now[0])  # type: ignore[arg-type]
    spec = parse_spec(ORG_SPEC)
    with aioresponses() as mock:
        gitea(mock)
        await observer.observe("team-a", spec)
        held = len(observer)
        secrets.tokens["team-a"] = "new-token"
        now[0] += 10
        await observer.observe("team-a", spec)
        assert len(observer) == 2 * held  # both tokens: scope, answer, metric sample each
        now[0] += IDLE_EXPIRY - 5  # the old token idle past the expiry; the new one not
        await observer.observe("team-a", spec)
        assert len(observer) == held
