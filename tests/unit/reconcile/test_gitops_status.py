"""What GitOps tools read from a group's status (issue 37): ``observedGeneration`` on the status
and on each condition, ``Reconciling`` while a new generation is on its way to Ready,
``Stalled`` (with Ready's reason and message) for what waits for a person, and no status write
at all from a quiet group. Each test drives the real reconciler over the in-memory cluster and
reads the status it wrote, as kstatus, ``kubectl wait`` and Argo CD would."""

from __future__ import annotations

from gitea_runner_operator.api.observation import Problem, Snapshot
from gitea_runner_operator.reconcile.status.conditions import STALL_GRACE
from tests.support.builders import VALID
from tests.support.fake_cluster import T0, snapshot
from tests.support.gitops import HOST_PATH, MISSING, World, group, kstatus, quiet, waits_done


async def test_a_healthy_group_is_current_and_every_condition_names_its_generation():
    world = World(snapshot(queued=0))
    await world.pass_after(1)
    status = world.cluster.status
    assert status is not None and status["observedGeneration"] == 1
    assert {"Ready", "RunnersHealthy"} <= world.kinds()
    assert not {"Reconciling", "Stalled"} & world.kinds()
    assert all(c["observedGeneration"] == 1 for c in status["conditions"])
    assert kstatus(group(world)) == "Current" and waits_done(world)


async def test_a_new_group_reads_reconciling_from_its_first_pass():
    world = World(None)
    world.cluster.finalizers = []
    assert kstatus(group(world)) == "Current"  # no status: kstatus has nothing to go by
    await world.pass_after(1)
    assert world.cluster.finalizers  # the first pass adds the finalizer ...
    reconciling = world.condition("Reconciling")  # ... and says the group is on its way
    assert reconciling is not None and reconciling["observedGeneration"] == 1
    assert kstatus(group(world)) == "InProgress" and not waits_done(world)
    writes = world.cluster.status_writes
    await world.pass_after(1)  # no answer yet: nothing new to say
    assert world.cluster.status_writes == writes


async def test_a_new_generation_is_reconciling_until_the_first_answer_for_it():
    world = World(snapshot(queued=0))
    await world.pass_after(1)
    ready_since = world.condition("Ready")["lastTransitionTime"]  # type: ignore[index]
    world.edit(maxActiveRunners=5)
    world.sources.source.latest = None  # the new spec's poll task has not answered yet
    await world.pass_after(2)
    reconciling = world.condition("Reconciling")
    assert reconciling is not None and reconciling["status"] == "True"
    assert reconciling["observedGeneration"] == 2 and "generation 2" in reconciling["message"]
    # The status still describes generation 1, and says so: kubectl wait does not take it.
    assert world.condition("Ready")["observedGeneration"] == 1  # type: ignore[index]
    assert world.cluster.status["observedGeneration"] == 1  # type: ignore[index]
    assert kstatus(group(world)) == "InProgress" and not waits_done(world)
    writes = world.cluster.status_writes
    await world.pass_after(0.1)  # another pass before the answer: nothing new to say
    assert world.cluster.status_writes == writes
    world.sources.source.latest = snapshot(queued=0, started_at=50.0)
    await world.pass_after(2)
    assert world.condition("Reconciling") is None
    ready = world.condition("Ready")
    assert ready is not None and ready["observedGeneration"] == 2
    assert ready["lastTransitionTime"] == ready_since  # True all along: no transition
    assert kstatus(group(world)) == "Current" and waits_done(world)


async def test_a_new_generation_that_gitea_fails_stays_reconciling_not_stalled():
    world = World(snapshot(problem=Problem("GiteaUnreachable", "https://gitea: refused")))
    await world.pass_after(1)
    reconciling = world.condition("Reconciling")
    assert reconciling is not None and reconciling["reason"] == "GiteaUnreachable"
    assert world.condition("Stalled") is None
    assert kstatus(group(world)) == "InProgress"
    world.sources.source.latest = snapshot(queued=0, started_at=50.0)
    await world.pass_after(2)
    assert world.condition("Reconciling") is None and waits_done(world)


async def test_gitea_failing_a_group_that_was_ready_is_neither_reconciling_nor_stalled():
    world = World(snapshot(queued=0))
    await world.pass_after(1)
    world.sources.source.latest = snapshot(problem=Problem("GiteaUnreachable", "refused"))
    await world.pass_after(2)
    assert world.condition("Ready")["status"] == "False"  # type: ignore[index]
    assert not {"Reconciling", "Stalled"} & world.kinds()
    # kstatus falls back on Ready: in progress, not failed; nobody needs to act.
    assert kstatus(group(world)) == "InProgress"


async def test_an_invalid_spec_is_stalled_with_readys_reason_and_message():
    world = World(snapshot(queued=0))
    await world.pass_after(1)
    world.edit(maxActiveRunners=-1)
    await world.pass_after(2)
    stalled, ready = world.condition("Stalled"), world.condition("Ready")
    assert stalled is not None and ready is not None
    assert (stalled["status"], stalled["reason"]) == ("True", "InvalidSpec")
    assert stalled["message"] == ready["message"] and "maxActiveRunners" in ready["message"]
    assert stalled["observedGeneration"] == ready["observedGeneration"] == 2
    assert world.condition("Reconciling") is None
    assert kstatus(group(world)) == "Failed" and not waits_done(world)
    # The fix is a new generation: Stalled goes, Ready comes back for it.
    world.edit(maxActiveRunners=3)
    world.sources.source.latest = snapshot(queued=0, started_at=60.0)
    await world.pass_after(2)
    assert world.condition("Stalled") is None and waits_done(world)
    assert kstatus(group(world)) == "Current"


async def test_a_refused_template_is_stalled_at_once():
    world = World(snapshot(queued=0), spec={**VALID, "template": HOST_PATH})
    await world.pass_after(1)
    stalled = world.condition("Stalled")
    assert stalled is not None and stalled["reason"] == "TemplateNotAllowed"
    assert "hostPath" in stalled["message"]
    assert kstatus(group(world)) == "Failed"


async def test_a_missing_secret_is_reconciling_within_the_grace_then_stalled():
    world = World(snapshot(problem=MISSING))
    requeue = await world.pass_after(1)
    reconciling = world.condition("Reconciling")
    assert reconciling is not None and reconciling["reason"] == "SecretNotFound"
    assert "Stalled" in reconciling["message"]
    assert world.condition("Stalled") is None and kstatus(group(world)) == "InProgress"
    # The same failed answer queues no pass: the reconciler comes back when the grace ends.
    assert requeue is not None and 0 < requeue <= STALL_GRACE
    await world.pass_after(STALL_GRACE / 2)
    assert world.condition("Stalled") is None
    await world.pass_after(STALL_GRACE / 2)
    stalled = world.condition("Stalled")
    assert stalled is not None and stalled["reason"] == "SecretNotFound"
    assert stalled["message"] == world.condition("Ready")["message"]  # type: ignore[index]
    assert world.condition("Reconciling") is None
    assert kstatus(group(world)) == "Failed"
    # A restart forgets when the problem began, not that it was reported Stalled.
    world.restart()
    await world.pass_after(2)
    assert world.condition("Stalled") is not None
    # The Secret appears: Ready, and neither of the two.
    world.sources.source.latest = snapshot(queued=0, started_at=90.0)
    await world.pass_after(2)
    assert not {"Reconciling", "Stalled"} & world.kinds()
    assert kstatus(group(world)) == "Current" and waits_done(world)


async def test_a_secret_that_appears_within_the_grace_is_never_stalled():
    world = World(snapshot(problem=MISSING))
    await world.pass_after(1)
    await world.pass_after(STALL_GRACE - 10)
    world.sources.source.latest = snapshot(queued=0, started_at=70.0)
    await world.pass_after(2)
    assert not {"Reconciling", "Stalled"} & world.kinds()
    # A later loss of the Secret gets its own full grace.
    world.sources.source.latest = snapshot(problem=MISSING)
    await world.pass_after(30)
    assert world.condition("Stalled") is None
    assert world.condition("Reconciling") is not None


async def test_quiet_passes_over_an_hour_write_no_status():
    world = World(quiet(T0 + 30))
    await world.pass_after(1)
    first = world.cluster.status
    assert first is not None and "lastCheckTime" in first
    written = world.cluster.status_writes
    for _ in range(60):  # the once-a-minute resync, each with a fresh answer from Gitea
        world.sources.source.latest = quiet(world.wall.now + 60)
        await world.pass_after(60)
    assert world.cluster.status_writes == written
    assert world.cluster.status["lastCheckTime"] == first["lastCheckTime"]  # type: ignore[index]
    # The freshness moved to the metric instead.
    metrics = world.reconciler._metrics.registry
    seen = metrics.get_sample_value(
        "gitea_runner_operator_last_check_timestamp_seconds",
        {"namespace": "team-a", "runnergroup": "ci"},
    )
    assert seen == world.wall.now
    # A real change goes out, and takes the current lastCheckTime with it.
    world.sources.source.latest = Snapshot(
        started_at=world.wall.now,
        checked_at=quiet(world.wall.now).checked_at,
        observation=snapshot(queued=2).observation,
    )
    await world.pass_after(60)
    assert world.cluster.status_writes > written
    assert world.cluster.status["lastCheckTime"] == quiet(world.wall.now - 60).checked_at  # type: ignore[index]


async def test_saying_a_generation_is_on_its_way_leaves_other_steps_fields_as_written():
    # The informer's copy of the group may lag a write made earlier in the same pass: the
    # cache step has just written status.cache ready. Sending that copy back with the
    # Reconciling condition put "starting" back, and nothing wrote "ready" again.
    world = World(snapshot(queued=0))
    await world.pass_after(1)
    assert world.cluster.status is not None
    lagging = {**world.cluster.status, "cache": {"ready": False, "reason": "CacheServerStarting"}}
    world.cluster.status["cache"] = {"ready": True, "reason": "Ready"}
    informer = world.cache.group
    world.cache.group = lambda key: {**informer(key), "status": lagging}  # type: ignore[method-assign]
    world.edit(maxActiveRunners=5)
    world.sources.source.latest = None  # the new spec's poll task has not answered yet
    await world.pass_after(2)
    assert world.condition("Reconciling") is not None
    assert world.cluster.status["cache"] == {"ready": True, "reason": "Ready"}
