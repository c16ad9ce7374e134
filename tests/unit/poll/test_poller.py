"""The per-group Gitea task: how often it asks, how it recovers, and how it reaps.

Reaping is where a wrong move kills a CI job, so the fake Gitea here lets a runner take a job
in the window between the plan (made from an older runner list) and the reap."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gitea_runner_operator.api.gitea import ActionJob, ActionRunner
from gitea_runner_operator.api.observation import Observation, Problem, ProblemKind, Snapshot
from gitea_runner_operator.poll.pacing import Pacing, next_delay
from gitea_runner_operator.poll.poller import GroupPoller
from gitea_runner_operator.reconcile.ports import ReapOrder
from gitea_runner_operator.reconcile.scaling import Orphan, ReapCandidate, ReapReason
from tests.support.builders import VALID
from tests.support.poller import (
    CANDIDATE,
    GROUP,
    IDLE,
    FakeRunnerRegistrations,
    _reaper,
    _run,
)


@pytest.mark.parametrize(
    ("failures", "retry_after", "kind", "expected"),
    [
        (0, None, None, 15),
        (1, None, ProblemKind.GITEA, 15),
        (2, None, ProblemKind.GITEA, 30),
        (3, None, ProblemKind.GITEA, 30),  # capped: recovery within 30 s of Gitea healing
        (10, None, ProblemKind.GITEA, 30),
        (1, 90, ProblemKind.GITEA, 90),  # Retry-After honoured
        (5, None, ProblemKind.SECRET, 3),  # a fixed Secret takes effect within seconds
        (1, None, ProblemKind.CLUSTER, 15),  # the API server failed the Secret read
        (3, None, ProblemKind.CLUSTER, 30),  # backs off like Gitea, not every 3 s
        (5, None, ProblemKind.CONFIG, 15),
    ],
)
def test_poll_delay(failures, retry_after, kind, expected):
    assert next_delay(15, failures, retry_after, kind, backoff_max=30) == expected


def test_a_long_poll_interval_is_never_shortened_by_the_backoff_cap():
    assert next_delay(300, 3, None, ProblemKind.GITEA, backoff_max=30) == 300


def _slow_poller(observe: Any, notify: Any, min_refresh: float) -> GroupPoller:
    """One group's poller with a 10-minute interval: every poll past the first is a wake-up."""
    from gitea_runner_operator.api.runnergroup import parse_spec

    spec = parse_spec({**VALID, "pollInterval": "600s"})
    return GroupPoller("team-a/ci", spec, observe, notify, pacing=Pacing(min_refresh=min_refresh))


def _snap(problem: Problem | None = None) -> Snapshot:
    obs = None if problem else Observation(queued=(), runners=())
    return Snapshot(started_at=0.0, checked_at="x", observation=obs, problem=problem)


async def test_wake_ups_are_coalesced_and_ignored_while_gitea_fails():

    calls = 0
    results: list[Snapshot] = [_snap(), _snap(Problem("GiteaServerError", "500"))]

    async def observe(namespace: str, spec: Any, newer_than: float) -> tuple[Snapshot, None]:
        nonlocal calls
        calls += 1
        return results[min(calls - 1, len(results) - 1)], None

    notified: list[str] = []
    poller = _slow_poller(observe, notified.append, min_refresh=0.05)
    poller.start()
    try:
        await asyncio.sleep(0.1)
        assert calls == 1 and notified == ["team-a/ci"]
        for _ in range(5):
            poller.wake()
        await asyncio.sleep(0.2)
        assert calls == 2  # five wake-ups, one observation
        assert poller.latest is not None and poller.latest.problem is not None
        poller.wake()  # Gitea is failing now: its backoff decides, not events
        await asyncio.sleep(0.2)
        assert calls == 2
    finally:
        await poller.stop()


async def test_a_paced_wake_up_is_asked_at_once_and_a_plain_one_waits_for_the_gap():
    # A webhook's wake-up is paced by the receiver already (a token bucket per group): the
    # poller's own gap must not hold it back a second time, or a job queued just after the
    # last woken refresh waits up to that gap (issue 27). The reconciler's own wake-ups keep
    # the gap. min_refresh is an hour here: a wait for it would never end within the test.

    calls = 0

    async def observe(namespace: str, spec: Any, newer_than: float) -> tuple[Snapshot, None]:
        nonlocal calls
        calls += 1
        return _snap(), None

    poller = _slow_poller(observe, lambda key: None, min_refresh=3600.0)
    poller.start()
    try:
        await asyncio.sleep(0.05)
        assert calls == 1
        poller.wake(paced=True)
        await asyncio.sleep(0.05)
        assert calls == 2  # at once
        poller.wake()
        await asyncio.sleep(0.05)
        assert calls == 2  # held back by the gap
    finally:
        await poller.stop()


async def test_an_idle_runner_is_disabled_rechecked_then_job_deleted_before_registration():
    gitea = FakeRunnerRegistrations([IDLE])
    reaper, cluster = _reaper(gitea, ["ci-h-jobxx"], ["ci-h-jobxx-podxx"])
    outcome = await _run(reaper, gitea, ReapOrder(GROUP, (CANDIDATE,)), [IDLE])
    assert outcome.reaped == [("ci-h-jobxx", ReapReason.IDLE)]
    assert gitea.calls[:3] == [("disable", 7), ("jobs", 0), ("get", 7)]
    assert gitea.log == ["delete job ci-h-jobxx", "deregister 7"]  # Job first
    assert cluster.events == [("Normal", "RunnerReaped")]


@pytest.mark.parametrize("can_disable", [True, False])
async def test_a_runner_that_takes_a_job_between_plan_and_reap_is_left_alone(can_disable):
    gitea = FakeRunnerRegistrations([IDLE], can_disable=can_disable)
    gitea.take_job_on = ("disable", 7)  # it fetched a task just now
    reaper, _ = _reaper(gitea, ["ci-h-jobxx"], ["ci-h-jobxx-podxx"])
    outcome = await _run(reaper, gitea, ReapOrder(GROUP, (CANDIDATE,)), [IDLE])
    assert outcome.reaped == [] and gitea.log == []
    assert 7 in gitea.runners and gitea.runners[7].busy
    if can_disable:
        assert ("enable", 7) in gitea.calls  # handed back, enabled


async def test_a_runner_named_by_a_running_job_is_left_alone_before_gitea_calls_it_busy():
    """Between FetchTask and the runner's first report Gitea's ``busy`` is still false; the
    job in progress already names the runner."""
    gitea = FakeRunnerRegistrations([IDLE])
    gitea.in_progress = [ActionJob(id=1, status="in_progress", runner_id=7, runner_name=IDLE.name)]
    reaper, _ = _reaper(gitea, ["ci-h-jobxx"], ["ci-h-jobxx-podxx"])
    outcome = await _run(reaper, gitea, ReapOrder(GROUP, (CANDIDATE,)), [IDLE])
    assert outcome.reaped == [] and gitea.log == []
    assert gitea.calls[-1] == ("enable", 7)  # handed back, enabled


@pytest.mark.parametrize("failure", ["listing fails", "listing cut short"])
async def test_no_runner_is_reaped_while_the_jobs_in_progress_are_unknown(failure):
    gitea = FakeRunnerRegistrations([IDLE])
    gitea.jobs_fail = failure == "listing fails"
    gitea.jobs_complete = failure != "listing cut short"
    reaper, _ = _reaper(gitea, ["ci-h-jobxx"], ["ci-h-jobxx-podxx"])
    outcome = await _run(reaper, gitea, ReapOrder(GROUP, (CANDIDATE,)), [IDLE])
    assert outcome.reaped == [] and gitea.log == []
    assert ("enable", 7) in gitea.calls


async def test_a_teardown_keeps_an_online_registration_a_job_names_but_not_an_offline_one():
    online = ActionRunner(id=2, name="ci-h-ccccc-ddddd", ephemeral=True, status="online")
    dead = ActionRunner(id=3, name="ci-h-eeeee-fffff", ephemeral=True, status="offline")
    gitea = FakeRunnerRegistrations([online, dead])
    gitea.in_progress = [
        ActionJob(id=1, status="in_progress", runner_id=2, runner_name=online.name),
        ActionJob(id=2, status="in_progress", runner_id=3, runner_name=dead.name),  # a zombie
    ]
    reaper, _ = _reaper(gitea, [], [])
    orphans = tuple(Orphan(r.id, r.name, require_offline=False) for r in (online, dead))
    outcome = await _run(reaper, gitea, ReapOrder(GROUP, (), orphans), [])
    assert outcome.deregistered == [dead.name]
    assert set(gitea.runners) == {2}


async def test_a_registration_already_gone_means_the_runner_worked_and_is_left_alone():
    gitea = FakeRunnerRegistrations([])
    reaper, _ = _reaper(gitea, ["ci-h-jobxx"], ["ci-h-jobxx-podxx"])
    outcome = await _run(reaper, gitea, ReapOrder(GROUP, (CANDIDATE,)), [])
    assert outcome.reaped == [] and gitea.log == []


async def test_a_job_that_is_gone_from_the_cluster_is_not_reaped_again():
    gitea = FakeRunnerRegistrations([IDLE])
    reaper, _ = _reaper(gitea, [], [])
    outcome = await _run(reaper, gitea, ReapOrder(GROUP, (CANDIDATE,)), [IDLE])
    assert outcome.reaped == [] and gitea.calls == []


async def test_a_starting_runner_that_registered_since_the_plan_gets_its_idle_time():
    gitea = FakeRunnerRegistrations([IDLE])
    starting = ReapCandidate("ci-h-jobxx", ReapReason.STARTUP_TIMEOUT, ("ci-h-jobxx-podxx",), ())
    reaper, _ = _reaper(gitea, ["ci-h-jobxx"], ["ci-h-jobxx-podxx"])
    outcome = await _run(reaper, gitea, ReapOrder(GROUP, (starting,)), [IDLE])
    assert outcome.reaped == [] and gitea.log == []


async def test_orphans_are_removed_only_when_offline_idle_and_podless():
    offline = ActionRunner(id=1, name="ci-h-aaaaa-bbbbb", ephemeral=True, status="offline")
    online = ActionRunner(id=2, name="ci-h-ccccc-ddddd", ephemeral=True, status="online")
    with_pod = ActionRunner(id=3, name="ci-h-eeeee-fffff", ephemeral=True, status="offline")
    gitea = FakeRunnerRegistrations([offline, online, with_pod])
    reaper, _ = _reaper(gitea, [], ["ci-h-eeeee-fffff"])
    orphans = tuple(Orphan(r.id, r.name) for r in (offline, online, with_pod))
    outcome = await _run(reaper, gitea, ReapOrder(GROUP, (), orphans), [])
    assert outcome.deregistered == ["ci-h-aaaaa-bbbbb"]
    assert set(gitea.runners) == {2, 3}


async def test_a_shared_request_cancelled_under_the_poll_does_not_end_the_groups_polling():
    # The observation waits for a fetch it shares with other groups; when that fetch is
    # cancelled (its last other waiter gone, its URL forgotten), the await raises
    # CancelledError in this task although nobody cancelled the task. Ending the loop there
    # left the group with no poll task: never asked again, its new spec never observed.

    calls = 0

    async def observe(namespace: str, spec: Any, newer_than: float) -> tuple[Snapshot, None]:
        nonlocal calls
        calls += 1
        if calls == 1:
            shared: asyncio.Future[Snapshot] = asyncio.get_running_loop().create_future()
            shared.cancel()  # what another party did to the request this poll shares
            return await shared, None
        return _snap(), None

    notified: list[str] = []
    poller = _slow_poller(observe, notified.append, min_refresh=0.0)
    poller.start()
    try:
        await asyncio.sleep(0.05)
        assert poller.running and calls == 1
        poller.wake()
        await asyncio.sleep(0.05)
        assert calls == 2 and poller.latest is not None and poller.latest.problem is None
        assert notified == ["team-a/ci", "team-a/ci"]  # the failed one, then the answer
    finally:
        await poller.stop()
    assert not poller.running  # stop() still ends it


async def test_a_poll_task_that_ended_on_its_own_is_restarted_by_the_next_pass():
    from gitea_runner_operator.api.runnergroup import parse_spec
    from gitea_runner_operator.poll.pollers import Pollers

    calls = 0
    handed: list[str] = []

    async def observe(namespace: str, spec: Any, newer_than: float) -> tuple[Snapshot, None]:
        nonlocal calls
        calls += 1
        return _snap(), None

    def notify(key: str) -> None:
        if not handed:
            handed.append("fault")
            raise RuntimeError("a fault outside the steps' own handlers")
        handed.append(key)

    pollers = Pollers(observe, notify, pacing=Pacing(min_refresh=0.0))
    spec = parse_spec({**VALID, "pollInterval": "600s"})
    first = await pollers.ensure("team-a/ci", spec)
    await asyncio.sleep(0.05)
    assert not first.running and "RuntimeError" in first.ended
    second = await pollers.ensure("team-a/ci", spec)  # same spec: only a dead task restarts
    try:
        assert second is not first and second.running
        await asyncio.sleep(0.05)
        assert calls == 2 and handed == ["fault", "team-a/ci"]
        assert await pollers.ensure("team-a/ci", spec) is second
    finally:
        await pollers.stop_all()


async def test_a_poll_task_hung_past_its_deadlines_is_restarted_by_the_next_pass():
    from gitea_runner_operator.api.runnergroup import parse_spec
    from gitea_runner_operator.poll.pollers import Pollers
    from gitea_runner_operator.poll.task_faults import BEAT_SLACK

    now = [1000.0]
    calls = 0
    never = asyncio.Event()

    async def observe(namespace: str, spec: Any, newer_than: float) -> tuple[Snapshot, None]:
        nonlocal calls
        calls += 1
        if calls == 1:
            await never.wait()  # a fault: an await with no deadline
        return _snap(), None

    pollers = Pollers(
        observe,
        lambda key: None,
        pacing=Pacing(min_refresh=0.0, observe_deadline=60),
        clock=lambda: now[0],
    )
    spec = parse_spec({**VALID, "pollInterval": "600s"})
    first = await pollers.ensure("team-a/ci", spec)
    await asyncio.sleep(0.02)
    now[0] += 60 + BEAT_SLACK - 1
    assert await pollers.ensure("team-a/ci", spec) is first  # slow, within its bound
    now[0] += 2
    second = await pollers.ensure("team-a/ci", spec)
    try:
        assert second is not first and not first.running
        await asyncio.sleep(0.02)
        assert calls == 2 and second.latest is not None
        now[0] += 0.95 * 600 + BEAT_SLACK - 1  # asleep until its next poll (jittered): not hung
        assert await pollers.ensure("team-a/ci", spec) is second
    finally:
        await pollers.stop_all()


async def test_a_step_that_fails_on_every_poll_logs_its_traceback_once_then_a_count():
    """A tenant's Gitea answers something no code foresaw, on every poll: the shared log gets
    the first traceback, then at most one line a minute per group and step with how many
    were held back (before: a traceback per poll, forever)."""
    from structlog.testing import capture_logs

    from gitea_runner_operator.api.runnergroup import parse_spec
    from gitea_runner_operator.kit.lograte import LogRate

    now = [0.0]
    calls = 0

    async def observe(namespace: str, spec: Any, newer_than: float) -> tuple[Snapshot, None]:
        nonlocal calls
        calls += 1
        raise KeyError("an answer nobody foresaw")

    rate = LogRate(60.0, clock=lambda: now[0])
    spec = parse_spec({**VALID, "pollInterval": "600s"})
    pollers = [
        GroupPoller(
            key, spec, observe, lambda key: None, pacing=Pacing(min_refresh=0.0), failures=rate
        )
        for key in ("team-a/ci", "team-b/ci")
    ]
    with capture_logs() as logs:
        for poller in pollers:
            poller.start()
        try:
            for second in range(1, 200):
                if second == 121:
                    now[0] = 61.0  # a minute later: one more line each, with the count
                for poller in pollers:
                    poller.wake(paced=True)
                await asyncio.sleep(0)
                await asyncio.sleep(0)
        finally:
            for poller in pollers:
                await poller.stop()
    assert calls > 100
    lines = [e for e in logs if e["event"] == "poll failed unexpectedly"]
    assert [line["group"] for line in lines] == ["team-a/ci", "team-b/ci"] * 2
    first, later = lines[:2], lines[2:]
    assert all(isinstance(line["exc_info"], KeyError) for line in first)
    assert all("exc_info" not in line and line["held_back"] > 10 for line in later)
    assert all(line["error"] == "KeyError('an answer nobody foresaw')" for line in later)


async def test_a_burst_of_new_poll_tasks_asks_gitea_spread_out_and_a_wake_up_goes_first(
    monkeypatch: pytest.MonkeyPatch,
):
    """A replica that takes many domains at once must not send every first poll in one
    breath (Gitea answers late, and every group reads "unreachable"); one that a webhook
    wakes still asks at once."""
    from gitea_runner_operator.api.runnergroup import parse_spec
    from gitea_runner_operator.poll import pollers as pollers_module

    monkeypatch.setattr(pollers_module, "FIRST_POLLS_PER_SECOND", 2.0)
    monkeypatch.setattr(pollers_module, "FIRST_POLLS_BURST", 3)
    asked: list[str] = []

    async def observe(namespace: str, spec: Any, newer_than: float) -> tuple[Snapshot, None]:
        asked.append(namespace)
        return _snap(), None

    pollers = pollers_module.Pollers(observe, lambda key: None, pacing=Pacing(min_refresh=0.0))
    spec = parse_spec({**VALID, "pollInterval": "600s"})
    try:
        for i in range(20):
            await pollers.ensure(f"team-{i:02d}/ci", spec)
        await asyncio.sleep(0.05)
        assert sorted(asked) == ["team-00", "team-01", "team-02"]  # the burst, no more
        poller = pollers.get("team-19/ci")
        assert poller is not None
        poller.wake()
        await asyncio.sleep(0.05)
        assert "team-19" in asked and len(asked) == 4
        await asyncio.sleep(1.15)  # two a second: at 0.5 and 1.0 s, in order; 1.5 s next
        assert asked[4:] == ["team-03", "team-04"]
        assert not any(p.hung for p in (pollers.get(f"team-{i:02d}/ci") for i in range(20)) if p)
    finally:
        await pollers.stop_all()


async def test_one_tenants_many_new_groups_do_not_all_ask_gitea_in_the_same_instant():
    """Issue 45's attacks: one tenant's 91 new groups polled at once (a burst of 100), and
    their first answers and passes set the healthy pickups' p99 at the onset. Now 20 ask at
    once, the rest at 100 a second: all within a second."""
    from gitea_runner_operator.api.runnergroup import parse_spec
    from gitea_runner_operator.poll import pollers as pollers_module

    asked: list[float] = []
    loop = asyncio.get_running_loop()

    async def observe(namespace: str, spec: Any, newer_than: float) -> tuple[Snapshot, None]:
        asked.append(loop.time())
        return _snap(), None

    pollers = pollers_module.Pollers(observe, lambda key: None, pacing=Pacing(min_refresh=0.0))
    spec = parse_spec({**VALID, "pollInterval": "600s"})
    started = loop.time()
    try:
        for i in range(91):
            await pollers.ensure(f"evil-urls/url-{i:02d}", spec)
        await asyncio.sleep(0.02)
        assert len(asked) <= 25  # the burst (and what 20 ms refilled), not 91
        await asyncio.sleep(1.2)
        assert len(asked) == 91  # every one within a second
        assert max(asked) - started < 1.2
    finally:
        await pollers.stop_all()
