"""Every fetch is charged, to its namespace's share of the read rate, what it read
(kit/tenant_reads.py): the bytes a poll's answers cost to read and parse, woken or not, and
an answer refused midway included."""

from __future__ import annotations

from aioresponses import aioresponses

from gitea_runner_operator.api.runnergroup import parse_spec
from gitea_runner_operator.kit.tenant_reads import ReadShares
from gitea_runner_operator.poll.observer import Observer
from tests.support.gitea_answers import ORG_SPEC, FakeSecrets, evil_gitea, evil_spec, gitea


async def test_a_fetch_is_charged_what_it_read_to_its_own_namespace_only(sessions):
    reads = ReadShares(1024, burst=1024)
    observer = Observer(
        FakeSecrets({"evil": "t-evil", "team": "t-team"}),  # type: ignore[arg-type]
        sessions,
        max_pages=4,
        reads=reads,
    )
    with aioresponses() as mock:
        evil_gitea(mock)
        gitea(mock)
        evil, _ = await observer.observe("evil", evil_spec(0))
        team, _ = await observer.observe("team", parse_spec(ORG_SPEC))
    assert evil.observation is not None and team.observation is not None
    # Four pages of 50 jobs with 64 labels each, about 170 KiB a page.
    assert reads.owed("evil") > 4 * 150 * 1024
    assert reads.wait("evil") > 60  # at its share of 1 KiB a second
    assert reads.owed("team") < reads.owed("evil") / 100
    await observer.drop(set())


async def test_an_answer_refused_for_its_size_is_charged_what_was_read_of_it(sessions):
    reads = ReadShares(1024, burst=1024)
    observer = Observer(
        FakeSecrets({"evil": "t-evil"}),  # type: ignore[arg-type]
        sessions,
        max_pages=40,
        max_answer_bytes=400 * 1024,  # past it after three pages or so
        reads=reads,
    )
    with aioresponses() as mock:
        evil_gitea(mock)
        evil, _ = await observer.observe("evil", evil_spec(0))
    assert evil.problem is not None and evil.problem.reason == "GiteaAnswerTooLarge"
    assert reads.owed("evil") > 300 * 1024
    await observer.drop(set())
