"""The runners that hold a slot are counted the same way by all three readers: the status
(GroupPass.alive), the family's claims (a group's spare room) and the scaling plan. If they
disagreed, a group could report room its plan then refuses to use, or the reverse."""

import pytest

from gitea_runner_operator.api.gitea import ActionRunner
from gitea_runner_operator.api.observation import Observation
from gitea_runner_operator.api.runnergroup import parse_spec
from gitea_runner_operator.objects.views import RunnerJobView
from gitea_runner_operator.reconcile.inputs import GroupPass
from gitea_runner_operator.reconcile.scaling import plan, runner_state
from gitea_runner_operator.reconcile.steps.claims import claimant
from tests.support.builders import spec_with

NOW = 10_000.0
MAX_ACTIVE = 10


def view(name: str, **kw: bool) -> RunnerJobView:
    flags = {"finished": False, "deleting": False, "took_job": False, **kw}
    return RunnerJobView(name=name, created_at=NOW - 30.0, pod_names=(f"{name}-pod",), **flags)


VIEWS = {
    "none": [],
    "live only": [view("a"), view("b"), view("c", took_job=True)],
    "finished and deleting do not count": [
        view("a"),
        view("b", finished=True),
        view("c", deleting=True),
        view("d", finished=True, took_job=True),
    ],
}


@pytest.mark.parametrize("pending", [0, 2])
@pytest.mark.parametrize("case", list(VIEWS))
def test_status_claims_and_plan_count_the_same_runners(case: str, pending: int) -> None:
    views = VIEWS[case]
    runners = (ActionRunner(id=1, name="a-pod", busy=False, status="online", ephemeral=True),)
    by_name = {r.name: r for r in runners}
    states = {v.name: runner_state(v, by_name) for v in views}
    spec = parse_spec(spec_with(maxActiveRunners=MAX_ACTIVE))

    p = GroupPass(
        key="team-a/ci",
        group={},
        views=views,
        jobs=[],
        all_pods={},
        pending=pending,
        spec=spec,
        states=states,
    )
    status = p.alive
    claimed = claimant(p, blocked=False, now=NOW)
    planned = plan(
        group_name="ci",
        group_uid="uid",
        jobs=views,
        observation=Observation(queued=(), runners=runners),
        offered=frozenset({"ubuntu-latest"}),
        max_active=MAX_ACTIVE,
        idle_timeout=600.0,
        startup_timeout=600.0,
        now=NOW,
        pending_creations=pending,
    ).alive

    expected = sum(1 for v in views if not (v.finished or v.deleting)) + pending
    assert status == planned == MAX_ACTIVE - claimed.spare == expected
