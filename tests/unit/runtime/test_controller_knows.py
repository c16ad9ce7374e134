"""What the webhook receiver asks the leading controller before it spends a group's wake-up
on a delivery (webhook/wakes.py ``WakeLimiter``): whether the group's latest answer lists
the delivery's job already."""

from __future__ import annotations

import time

from kubernetes_asyncio import client

from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.observation import Observation, Snapshot
from gitea_runner_operator.api.runnergroup import parse_spec
from gitea_runner_operator.poll.poller import GroupPoller
from gitea_runner_operator.runtime.controller import Controller
from gitea_runner_operator.settings import Settings
from tests.support.builders import VALID


async def test_the_controller_knows_the_jobs_its_groups_latest_answers_list():
    async with client.ApiClient() as api:
        controller = Controller(api, Settings())
        assert not controller.knows("team-a/ci", 7)  # no such group
        poller = GroupPoller("team-a/ci", parse_spec(VALID), controller.observer.observe, print)
        controller.pollers._pollers["team-a/ci"] = poller  # not started: no Gitea here
        assert not controller.knows("team-a/ci", 7)  # no answer yet
        queued = (ActionJob(id=7, labels=("ubuntu-latest",), status="queued"),)
        poller.latest = Snapshot(
            started_at=0.0, checked_at="x", observation=Observation(queued=queued, runners=())
        )
        assert controller.knows("team-a/ci", 7)
        assert not controller.knows("team-a/ci", 8)  # news: queued after that answer


async def test_the_controller_notes_when_a_delivery_last_woke_a_group():
    """The whole-heap collection waits out a woken pickup (runtime/gc_tuning.quiet_moment)."""
    async with client.ApiClient() as api:
        controller = Controller(api, Settings())
        assert controller.woken_at == float("-inf")
        before = time.monotonic()
        controller.wake("team-a/ci")  # no poller: the key is queued
        assert before <= controller.woken_at <= time.monotonic()
