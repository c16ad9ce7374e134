"""A quiet group's poll asks Gitea only for what can have changed: its queued jobs. The runner
list comes back with a runner Job alive or being created, one that ended, a due reap, and at
least every ``RUNNER_LIST_MAX_AGE``. Gitea is mocked (aioresponses) to count requests."""

from __future__ import annotations

import asyncio
import re
import time

from aioresponses import aioresponses

from gitea_runner_operator.api.runnergroup import parse_spec
from gitea_runner_operator.forge.client import SessionPool
from gitea_runner_operator.poll.observer import Observer
from gitea_runner_operator.poll.pacing import Pacing
from gitea_runner_operator.poll.poller import RUNNER_LIST_MAX_AGE, GroupPoller
from gitea_runner_operator.reconcile.ports import ReapOrder
from gitea_runner_operator.reconcile.scaling import ReapCandidate, ReapReason
from tests.support.gitea_answers import ORG_SPEC, QUEUED, RUNNERS, FakeSecrets, gitea


def requests_to(mock: aioresponses, pattern: re.Pattern[str]) -> int:
    return sum(
        len(calls) for (method, url), calls in mock.requests.items() if pattern.match(str(url))
    )


async def _poll(poller: GroupPoller) -> None:
    seen = poller.observations
    poller.wake(paced=True)
    for _ in range(300):
        await asyncio.sleep(0.01)
        if poller.observations > seen:
            return
    raise AssertionError("no observation")


async def test_a_quiet_groups_poll_sends_one_request_and_runner_jobs_bring_the_list_back():
    alive, changed = [False], [0.0]
    sessions = SessionPool()
    observer = Observer(FakeSecrets({"a": "t1"}), sessions)  # type: ignore[arg-type]
    poller = GroupPoller(
        "a/ci",
        parse_spec(ORG_SPEC),
        observer.observe,
        lambda key: None,
        pacing=Pacing(min_refresh=0.0),
        active=lambda key: alive[0],
        jobs_changed_at=lambda key: changed[0],
    )

    def asked() -> tuple[int, int]:
        return requests_to(mock, RUNNERS), requests_to(mock, QUEUED)

    try:
        with aioresponses() as mock:
            gitea(mock)
            poller.start()
            await _poll(poller)
            assert asked() == (1, 1)  # the first poll lists both
            await _poll(poller)
            await _poll(poller)
            assert asked() == (1, 3)  # quiet: one request a poll, the queued jobs
            assert poller.latest is not None and poller.latest.problem is None
            alive[0] = True  # a runner Job started: its registration comes and goes
            await _poll(poller)
            assert asked() == (2, 4)
            alive[0] = False
            changed[0] = time.monotonic()  # ... and ended: its registration goes
            await _poll(poller)
            assert asked() == (3, 5)
            await _poll(poller)
            assert asked() == (3, 6)
            candidate = ReapCandidate("ci-x", ReapReason.IDLE, (), ())
            poller.submit(ReapOrder({}, candidates=(candidate,)))  # a reap needs a fresh list
            await _poll(poller)
            assert asked()[0] == 4
    finally:
        await poller.stop()
        await observer.close()
        await sessions.close()


async def test_a_quiet_groups_runner_list_is_asked_again_after_its_longest_age():
    clock = [5000.0]
    poller = GroupPoller(
        "a/ci",
        parse_spec(ORG_SPEC),
        None,  # type: ignore[arg-type]
        lambda key: None,
        clock=lambda: clock[0],
        active=lambda key: False,
        jobs_changed_at=lambda key: 0.0,
    )
    assert poller._runners_since(clock[0]) is None  # nothing listed yet
    poller.latest = object()  # type: ignore[assignment]
    assert poller._runners_since(clock[0]) == clock[0] - RUNNER_LIST_MAX_AGE


def test_a_deleting_group_lists_its_runners_at_every_poll():
    """Its teardown removes every registration it can list: one made since the last list
    (a leftover from before, a runner registered by hand) must be seen, not a kept list."""
    poller = GroupPoller(
        "a/ci",
        parse_spec(ORG_SPEC),
        None,  # type: ignore[arg-type]
        lambda key: None,
        active=lambda key: False,
        jobs_changed_at=lambda key: 0.0,
    )
    poller.latest = object()  # type: ignore[assignment]
    assert poller._runners_since(time.monotonic()) is not None  # quiet: a kept list will do
    poller.hooks.deleting = True
    assert poller._runners_since(time.monotonic()) is None
