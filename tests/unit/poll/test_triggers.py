"""A group's reconcile is queued when something it reads changed, and no decision is missed:
a changed answer, a wake-up, a group with peers, a finished runner, a spec change, a timer,
and (the safety net) an event that never came, within the resync."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gitea_runner_operator.api.gitea import ActionJob, ActionRunner
from gitea_runner_operator.api.observation import Observation, Snapshot
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec, parse_spec
from gitea_runner_operator.objects.views import RunnerJobView
from gitea_runner_operator.poll.pacing import Pacing
from gitea_runner_operator.poll.poller import GroupPoller
from gitea_runner_operator.poll.pollers import Pollers
from gitea_runner_operator.poll.triggers import owned_changed
from gitea_runner_operator.reconcile.capacity.ledger import Ledger
from gitea_runner_operator.reconcile.scaling import RunnerState
from gitea_runner_operator.reconcile.timers import SLACK, next_due
from tests.support.builders import VALID

KEY = "team-a/ci"


def _spec(poll: str = "20ms") -> RunnerGroupSpec:
    return parse_spec(VALID).model_copy(update={"poll_interval": poll})


def _job(job_id: int) -> ActionJob:
    return ActionJob(id=job_id, status="queued", labels=("ubuntu-latest",))


class Answers:
    """Gitea's answers in turn; the last one repeats. Each poll asks again."""

    def __init__(self, *queued: tuple[int, ...]) -> None:
        self.queued = list(queued)
        self.calls = 0
        self.asked = asyncio.Condition()

    async def __call__(self, namespace: str, spec: Any, newer_than: float) -> Any:
        ids = self.queued[min(self.calls, len(self.queued) - 1)]
        self.calls += 1
        async with self.asked:
            self.asked.notify_all()
        obs = Observation(queued=tuple(_job(i) for i in ids), runners=())
        return Snapshot(float(self.calls), "now", observation=obs), None


async def _polls(answers: Answers, n: int) -> None:
    """Until Gitea was asked ``n`` times (and the poller has handed the answer over)."""
    async with answers.asked:
        await answers.asked.wait_for(lambda: answers.calls >= n)
    await asyncio.sleep(0.005)


async def _run(poller: GroupPoller, answers: Answers, polls: int) -> None:
    poller.start()
    try:
        await _polls(answers, polls)
    finally:
        await poller.stop()


async def test_an_unchanged_answer_queues_no_reconcile_a_changed_one_does():
    answers = Answers((1,), (1,), (1,), (1, 2), (1, 2), (1, 2))
    notified: list[str] = []
    poller = GroupPoller(KEY, _spec(), answers, notified.append, pacing=Pacing(min_refresh=0.0))
    await _run(poller, answers, 7)
    # The first answer, then the one in which job 2 appeared: two reconciles in 7 polls.
    assert notified == [KEY, KEY]


async def test_a_wake_up_always_reaches_the_reconcile_even_with_the_same_answer():
    answers = Answers((1,))
    notified: list[str] = []
    poller = GroupPoller(
        KEY, _spec("600s"), answers, notified.append, pacing=Pacing(min_refresh=0.0)
    )
    poller.start()
    try:
        await _polls(answers, 1)
        for expected in (2, 3):
            poller.wake()  # a webhook delivery, or the reconciler after a runner finished
            await _polls(answers, expected)
            await asyncio.sleep(0.01)
            assert len(notified) == expected
    finally:
        await poller.stop()


async def test_a_lost_event_converges_within_the_resync():
    """Nothing changes in Gitea and no event comes: the group is still reconciled once per
    resync, so whatever was missed is recomputed then (level-triggered)."""
    now = [0.0]
    answers = Answers((1,))
    real_call = answers.__call__

    async def observe(namespace: str, spec: Any, newer_than: float) -> Any:
        if answers.calls == 9:
            await asyncio.Event().wait()  # the tenth poll never ends: nine answers in all
        now[0] += 0.0625  # each poll, 62.5 ms later by the poller's clock (exact in binary)
        await asyncio.sleep(0.001)  # the poller's own sleeps are all in the past
        return await real_call(namespace, spec, newer_than)

    notified: list[str] = []
    poller = GroupPoller(
        KEY,
        _spec(),
        observe,
        notified.append,
        pacing=Pacing(min_refresh=0.0, resync=0.125),
        clock=lambda: now[0],
    )
    poller.start()
    try:
        await _polls(answers, 9)
    finally:
        await poller.stop()
    # Nine identical answers 62.5 ms apart with a 125 ms resync: the first, then every
    # second one.
    assert len(notified) == 5


def _weighed(answers: Any, notified: list[str], ledger: Ledger) -> GroupPoller:
    """A group whose family's ledger decides whether an unchanged answer still counts."""
    pacing = Pacing(min_refresh=0.0)
    return GroupPoller(
        KEY, _spec(), answers, notified.append, pacing=pacing, every_answer=ledger.must_weigh
    )


async def test_a_group_with_peers_hands_over_every_answer():
    """Its peers weigh its answer by when it was asked (the family's accounting): a fresher
    copy of the same answer can end another group's claim on a job, so it is never skipped."""
    ledger = Ledger()
    assert ledger.has_peers(KEY)  # not reported yet: treated as shared
    answers = Answers((1,))
    notified: list[str] = []
    poller = _weighed(answers, notified, ledger)
    await _run(poller, answers, 5)
    assert len(notified) >= 4


async def test_a_quiet_family_skips_unchanged_answers_until_a_peer_lists_a_job():
    """Peers weigh answers by age only while their family lists a queued job: before, five
    unchanged answers cost one reconcile; once a peer lists a job, every answer counts."""
    from gitea_runner_operator.api.runnergroup import Scope
    from gitea_runner_operator.reconcile.capacity.accounting import Answer
    from tests.support.claims import group, job

    ledger = Ledger(min_interval=0)
    peer = group("team-b/app", Scope.REPO, "acme", "app")
    ledger.report("https://g.test", peer, Answer(peer.key, 0.0, []))
    ledger.report("https://g.test", group(KEY, Scope.REPO, "acme", "app"), Answer(KEY, 0.0, []))
    ledger.share(KEY)
    answers = Answers(())
    notified: list[str] = []
    poller = _weighed(answers, notified, ledger)
    poller.start()
    try:
        await asyncio.wait_for(_polls(answers, 5), 10)
        assert len(notified) == 1  # the first answer only
        ledger.report("https://g.test", peer, Answer(peer.key, 6.0, [job(1)]))
        await asyncio.wait_for(_polls(answers, answers.calls + 3), 10)
        assert len(notified) >= 3
    finally:
        await poller.stop()


async def test_a_spec_change_hands_over_the_first_answer_of_the_new_poller():
    answers = Answers((1,))
    notified: list[str] = []
    pollers = Pollers(answers, notified.append, pacing=Pacing(min_refresh=0.0))
    await pollers.ensure(KEY, _spec())
    await _polls(answers, 3)
    before = len(notified)
    assert before == 1
    await pollers.ensure(KEY, _spec("30ms"))  # the spec changed: a new task
    await _polls(answers, answers.calls + 2)
    await pollers.stop_all()
    assert len(notified) == before + 1


def _pod(rv: str, phase: str, probe: str = "t1") -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "resourceVersion": rv},
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": probe}],
        },
    }


def test_a_finished_runner_queues_the_reconcile_a_resource_version_alone_does_not():
    assert owned_changed("MODIFIED", _pod("2", "Succeeded"), _pod("1", "Running"))
    assert not owned_changed("MODIFIED", _pod("2", "Running", "t2"), _pod("1", "Running"))
    assert owned_changed("ADDED", _pod("1", "Running"), None)
    assert owned_changed("DELETED", _pod("2", "Running"), _pod("1", "Running"))


def _view(name: str, created: float, started: float | None = None, **kw: Any) -> RunnerJobView:
    return RunnerJobView(
        name=name,
        created_at=created,
        finished=False,
        deleting=False,
        took_job=False,
        started_at=started,
        all_pod_names=(f"{name}-pod",),
        **kw,
    )


def test_an_idle_runner_brings_its_group_back_when_its_idle_timeout_expires():
    views = [_view("idle", 0.0, started=100.0), _view("busy", 0.0, started=10.0)]
    states = {"idle": RunnerState.IDLE, "busy": RunnerState.BUSY}
    due = next_due(
        views, states, now=150.0, startup_timeout=600, idle_timeout=300, warm_max_age=3600
    )
    assert due == 250.0 + SLACK  # 100 + 300 - 150


def test_a_starting_runner_brings_its_group_back_at_the_first_of_its_deadlines():
    views = [_view("s", 1000.0)]
    due = next_due(
        views,
        {"s": RunnerState.STARTING},
        now=1010.0,
        startup_timeout=600,
        idle_timeout=300,
        warm_max_age=3600,
        start_bound=120,
    )
    assert due == 110.0 + SLACK  # the claims' start bound comes before startupTimeout


def test_busy_runners_and_past_deadlines_set_no_timer():
    views = [_view("busy", 0.0, started=1.0), _view("late", 0.0)]
    states = {"busy": RunnerState.BUSY, "late": RunnerState.STARTING}
    assert (
        next_due(views, states, now=10_000, startup_timeout=60, idle_timeout=60, warm_max_age=60)
        is None
    )


def test_a_changed_share_queues_the_peer_even_when_its_own_answer_did_not_change():
    """The family's accounting tells the peer whose share grew (Ledger.notify, wired to the
    work queue): its reconcile runs without waiting for a changed answer of its own."""
    from gitea_runner_operator.api.runnergroup import Scope
    from tests.support.claims import group, job, report

    told: list[str] = []
    ledger = Ledger(notify=told.append, min_interval=0)
    assert ledger.has_peers("team-a/org")
    report(ledger, group("team-b/app", Scope.REPO, "acme", "app", spare=0), [job(1)])
    report(ledger, group("team-a/org", Scope.ORG, "acme", spare=0), [job(1)])
    ledger.share("team-b/app")
    assert ledger.has_peers("team-a/org") and ledger.has_peers("team-b/app")
    # Only the org group's capacity changes (same answer): it is told its share grew.
    report(ledger, group("team-a/org", Scope.ORG, "acme", spare=3), [job(1)])
    ledger.share("team-b/app")
    assert told == ["team-a/org"]
    report(ledger, group("x/o", Scope.ORG, "other"), [job(2, "other/x")])
    ledger.share("x/o")
    assert not ledger.has_peers("x/o")  # alone in its family: unchanged answers are skipped


async def test_a_reconcile_with_an_idle_runner_asks_to_come_back_when_its_timer_expires():
    """With no poll queueing a pass for an unchanged answer, the reconcile itself asks to
    come back when its idle runner's idleTimeout ends, and that pass proposes the reap."""
    from tests.support.fake_cluster import T0, FakeCluster, make, runner_pod, snapshot

    cluster = FakeCluster()
    first, _, _ = make(cluster, snapshot(queued=1))
    await first.reconcile(KEY)
    cluster.sync()
    (name,) = cluster.jobs
    pod = f"{name}-bcdfg"
    cluster.pods = [runner_pod(name, pod)]  # created at T0; no start time: idle counts from then
    idle = snapshot(runners=(ActionRunner(id=5, name=pod),))
    spec = {**VALID, "maxActiveRunners": 3, "idleTimeout": "300s"}
    now = T0 + 100
    quiet, sources, _ = make(cluster, idle, spec=spec, wall=now)
    result = await quiet.reconcile(KEY)
    assert sources.source.orders[-1].candidates == ()  # not idle long enough yet
    assert result.requeue_after == pytest.approx(200 + SLACK)
    later, sources, _ = make(cluster, idle, spec=spec, wall=now + result.requeue_after)
    await later.reconcile(KEY)
    (candidate,) = sources.source.orders[-1].candidates
    assert candidate.job_name == name
