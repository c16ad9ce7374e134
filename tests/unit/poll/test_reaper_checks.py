"""The reaper checks every kind of candidate against what Gitea lists as running, reads the
Job's Pods again (a replacement Pod registers under its own name), and a pass cut short by
its deadline re-enables every registration it disabled."""

from __future__ import annotations

import asyncio
from typing import Any

from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.reconcile.ports import ReapOrder
from gitea_runner_operator.reconcile.scaling import ReapCandidate, ReapReason
from tests.support.poller import CANDIDATE, GROUP, IDLE, FakeRunnerRegistrations, _reaper, _run

JOB = "ci-h-jobxx"


def running(name: str, runner_id: int = 99) -> ActionJob:
    return ActionJob(id=1, status="in_progress", runner_id=runner_id, runner_name=name)


async def test_an_unregistered_startup_candidate_named_by_a_running_job_is_left_alone():
    """Probe: a Job whose runner a running job names was deleted, because candidates without
    a registration skipped every check."""
    gitea = FakeRunnerRegistrations([])
    gitea.in_progress = [running(f"{JOB}-podxx")]
    starting = ReapCandidate(JOB, ReapReason.STARTUP_TIMEOUT, (f"{JOB}-podxx",), ())
    reaper, _ = _reaper(gitea, [JOB], [f"{JOB}-podxx"])
    outcome = await _run(reaper, gitea, ReapOrder(GROUP, (starting,)), [])
    assert outcome.reaped == [] and gitea.log == []


async def test_a_replacement_pod_running_a_job_keeps_its_job_alive():
    gitea = FakeRunnerRegistrations([])
    gitea.in_progress = [running(f"{JOB}-newpd")]  # the Job's second Pod took a job
    leaving = ReapCandidate(JOB, ReapReason.GROUP_DELETED, (f"{JOB}-podxx",), ())
    reaper, _ = _reaper(gitea, [JOB], [f"{JOB}-newpd"])  # the cache shows the new Pod
    outcome = await _run(reaper, gitea, ReapOrder(GROUP, (leaving,)), [])
    assert outcome.reaped == [] and gitea.log == []


async def test_no_unregistered_candidate_is_reaped_while_running_jobs_are_unknown():
    gitea = FakeRunnerRegistrations([])
    gitea.jobs_complete = False
    starting = ReapCandidate(JOB, ReapReason.STARTUP_TIMEOUT, (f"{JOB}-podxx",), ())
    reaper, _ = _reaper(gitea, [JOB], [f"{JOB}-podxx"])
    outcome = await _run(reaper, gitea, ReapOrder(GROUP, (starting,)), [])
    assert outcome.reaped == [] and gitea.log == []


async def test_an_unregistered_candidate_nobody_names_is_reaped():
    gitea = FakeRunnerRegistrations([])
    gitea.in_progress = [running("someone-else")]
    starting = ReapCandidate(JOB, ReapReason.STARTUP_TIMEOUT, (f"{JOB}-podxx",), ())
    reaper, _ = _reaper(gitea, [JOB], [f"{JOB}-podxx"])
    outcome = await _run(reaper, gitea, ReapOrder(GROUP, (starting,)), [])
    assert outcome.reaped == [(JOB, ReapReason.STARTUP_TIMEOUT)]


class HangingGitea(FakeRunnerRegistrations):
    """Listing the jobs in progress never answers: the pass runs into its deadline."""

    async def list_jobs(self, scope: Any, status: str = "queued", max_pages: Any = None) -> Any:
        self.calls.append(("jobs", 0))
        await asyncio.Event().wait()


async def test_a_pass_cut_short_by_its_deadline_re_enables_what_it_disabled():
    gitea = HangingGitea([IDLE])
    reaper, _ = _reaper(gitea, [JOB], [f"{JOB}-podxx"])
    try:
        async with asyncio.timeout(0.2):
            await _run(reaper, gitea, ReapOrder(GROUP, (CANDIDATE,)), [IDLE])
    except TimeoutError:
        pass
    await reaper.close()
    assert ("disable", 7) in gitea.calls
    assert gitea.calls[-1] == ("enable", 7)
    assert gitea.log == []  # nothing deleted


async def test_a_reaped_runner_is_not_re_enabled_afterwards():
    gitea = FakeRunnerRegistrations([IDLE])
    reaper, _ = _reaper(gitea, [JOB], [f"{JOB}-podxx"])
    outcome = await _run(reaper, gitea, ReapOrder(GROUP, (CANDIDATE,)), [IDLE])
    assert outcome.reaped and ("enable", 7) not in gitea.calls


async def test_a_busy_runner_looked_at_on_every_poll_is_one_log_line_a_minute():
    """Seen on the testbed: a deleted group's busy runner, looked at every 0.5 s while it
    drained, wrote "reap skipped" twice a second for the whole drain."""
    from structlog.testing import capture_logs

    gitea = FakeRunnerRegistrations([])
    gitea.in_progress = [running(f"{JOB}-podxx")]
    starting = ReapCandidate(JOB, ReapReason.GROUP_DELETED, (f"{JOB}-podxx",), ())
    reaper, _ = _reaper(gitea, [JOB], [f"{JOB}-podxx"])
    with capture_logs() as logs:
        for _ in range(20):
            outcome = await _run(reaper, gitea, ReapOrder(GROUP, (starting,)), [])
            assert outcome.reaped == []
    skipped = [e for e in logs if e["event"].startswith("reap skipped")]
    assert len(skipped) == 1 and skipped[0]["job"] == JOB
