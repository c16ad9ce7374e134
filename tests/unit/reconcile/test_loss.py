"""Lost runners: which Pod endings are losses, and what is done about the job they held."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gitea_runner_operator.api.gitea import ActionRunner
from gitea_runner_operator.api.loss import (
    MAX_LOSS_RECORDS,
    OPEN_LOSS_TTL,
    LossRecord,
    LossState,
    loss_records,
)
from gitea_runner_operator.api.naming import runner_prefix
from gitea_runner_operator.api.refs import is_repository
from gitea_runner_operator.api.runnergroup import parse_spec
from gitea_runner_operator.objects.disruption import loss_cause
from gitea_runner_operator.objects.job_template import render_runner_job
from gitea_runner_operator.objects.views import RunnerJobView
from gitea_runner_operator.reconcile.loss import decide, expired, find_losses, prior_reruns
from tests.support.builders import VALID


def pod(
    name: str = "ci-abc-1-x",
    *,
    phase: str = "Running",
    condition: str | None = None,
    reason: str | None = None,
    terminated: dict[str, Any] | None = None,
    last: dict[str, Any] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "conditions": []}
    if condition:
        status["conditions"].append(
            {"type": "DisruptionTarget", "status": "True", "reason": condition}
        )
    if reason:
        status["reason"] = reason
    runner: dict[str, Any] = {"name": "runner", "state": {"running": {}}}
    if terminated is not None:
        runner["state"] = {"terminated": terminated}
    if last is not None:
        runner["lastState"] = {"terminated": last}
    status["containerStatuses"] = [runner]
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": status}


@pytest.mark.parametrize(
    ("the_pod", "cause"),
    [
        (pod(condition="EvictionByEvictionAPI", deleting=True), "EvictionByEvictionAPI"),
        (pod(condition="DeletionByTaintManager", deleting=True), "DeletionByTaintManager"),
        (pod(condition="PreemptionByScheduler", deleting=True), "PreemptionByScheduler"),
        (pod(phase="Failed", condition="TerminationByKubelet"), "TerminationByKubelet"),
        (pod(condition="DeletionByPodGC", deleting=True), "DeletionByPodGC"),
        (pod(phase="Failed", reason="Evicted"), "Evicted"),
        (pod(phase="Failed", terminated={"reason": "OOMKilled", "exitCode": 137}), "OOMKilled"),
        # restarted in place by the kubelet (restartPolicy OnFailure): the last state tells
        (pod(last={"reason": "OOMKilled", "exitCode": 137}), "OOMKilled"),
        (pod(phase="Failed", terminated={"reason": "Error", "exitCode": 137}), "Signal9"),
        (pod(phase="Failed", terminated={"reason": "Error", "exitCode": 143}), "Signal15"),
        (pod(deleting=True), "Deleted"),
        # the runner's own ends: after its one job (whatever the job's result), or a crash
        (pod(phase="Succeeded", terminated={"reason": "Completed", "exitCode": 0}), None),
        (pod(phase="Failed", terminated={"reason": "Error", "exitCode": 1}), None),
        (pod(), None),
        # the user's own cap
        (pod(phase="Failed", reason="DeadlineExceeded", deleting=True), None),
    ],
)
def test_loss_causes(the_pod, cause):
    assert loss_cause(the_pod) == cause


def view(name: str, took_job: bool = False) -> RunnerJobView:
    return RunnerJobView(name=name, created_at=0, finished=False, deleting=False, took_job=took_job)


def registered(name: str, busy: bool = False, rid: int = 7) -> ActionRunner:
    return ActionRunner(id=rid, name=name, status="online", busy=busy, ephemeral=True)


def test_a_busy_runner_deleted_is_lost_an_idle_one_is_not():
    views = [view("busy", took_job=True), view("idle")]
    pods = {"busy": [pod("busy-p", deleting=True)], "idle": [pod("idle-p", deleting=True)]}
    lost = find_losses(views, pods, [], [registered("idle-p")])
    assert [(x.job_name, x.pod, x.cause) for x in lost] == [("busy", "busy-p", "Deleted")]


def test_an_evicted_registered_runner_counts_even_before_it_was_seen_busy():
    views = [view("a"), view("b")]
    pods = {
        "a": [pod("a-p", condition="EvictionByEvictionAPI", deleting=True)],
        "b": [pod("b-p", condition="EvictionByEvictionAPI", deleting=True)],  # never registered
    }
    lost = find_losses(views, pods, [], [registered("a-p")])
    assert [x.job_name for x in lost] == ["a"]


def test_a_runner_job_being_deleted_stops_its_idle_runner_on_purpose():
    reaped = RunnerJobView(name="a", created_at=0, finished=False, deleting=True, took_job=False)
    pods = {"a": [pod("a-p", phase="Failed", terminated={"exitCode": 143}, deleting=True)]}
    assert find_losses([reaped], pods, [], [registered("a-p")]) == []


def test_a_recorded_loss_is_not_found_again():
    pods = {"a": [pod("a-p", phase="Failed", terminated={"exitCode": 137})]}
    assert find_losses([view("a", True)], pods, ["a"], []) == []


def test_decisions():
    base = dict(
        job_done=True,
        conclusion="failure",
        job_attempt=1,
        run_done=True,
        run_attempt=1,
        prior=0,
        limit=1,
    )
    assert decide(**base).state is LossState.RERUN
    assert decide(**{**base, "conclusion": "cancelled"}).state is LossState.RERUN
    assert decide(**{**base, "job_done": False}).state is None  # Gitea has not failed it yet
    assert decide(**{**base, "run_done": False}).state is None  # Gitea re-runs finished runs
    assert decide(**{**base, "conclusion": "success"}).state is LossState.NOT_NEEDED
    assert decide(**{**base, "prior": 1}).state is LossState.LIMIT
    assert decide(**{**base, "prior": 1, "limit": 2}).state is LossState.RERUN
    assert decide(**{**base, "limit": 0}).state is LossState.DISABLED
    # someone (or this operator, before a crash) re-ran the run already: never twice
    assert decide(**{**base, "run_attempt": 2}).state is LossState.NOT_NEEDED


def test_the_count_follows_the_job_line_across_reruns():
    first = LossRecord("p1", "OOMKilled", 1.0, LossState.RERUN, "o/r", 5, 10, "build", reruns=1)
    second = LossRecord("p2", "Deleted", 2.0, LossState.HELD, "o/r", 5, 11, "build")
    other = LossRecord("p3", "Deleted", 2.0, LossState.HELD, "o/r", 5, 12, "test")
    records = {"j1": first, "j2": second, "j3": other}
    assert prior_reruns(records, second) == 1
    assert prior_reruns(records, other) == 0


def test_records_round_trip_and_garbage_is_ignored():
    rec = LossRecord("p", "Signal9", 3.5, LossState.HELD, "o/r", 1, 2, "j", runner_id=4)
    job_a, job_b = runner_prefix("ci", "u1") + "bcdfg", runner_prefix("ci", "u1") + "hjklm"
    rec = replace(rec, pod=job_a + "-npqrs")
    group = {
        "metadata": {"name": "ci", "uid": "u1"},
        "status": {"losses": {job_a: rec.encode(), job_b: "{not json"}},
    }
    assert loss_records(group) == {job_a: rec}


def test_settled_records_expire_and_are_capped_open_ones_stay_for_hours():
    now = 200_000.0
    old = LossRecord("p", "Deleted", 1.0, LossState.RERUN, settled_at=1.0)
    open_ = LossRecord("q", "Deleted", now - 60, LossState.HELD)
    assert expired({"old": old, "open": open_}, now) == ["old"]
    # an open record whose follow-up never ends (a 403 on its repository) goes after 6 h
    stuck = LossRecord("s", "Deleted", now - OPEN_LOSS_TTL - 1, LossState.HELD)
    assert expired({"open": open_, "stuck": stuck}, now) == ["stuck"]
    many = {
        f"r{i}": LossRecord("p", "x", now, LossState.NO_JOB, settled_at=now - i)
        for i in range(MAX_LOSS_RECORDS + 3)
    }
    dropped = expired(many, now)
    assert len(dropped) == 3 and set(dropped) == {f"r{MAX_LOSS_RECORDS + i}" for i in range(3)}


def test_runner_pods_get_the_grace_period_of_the_spec_unless_the_template_sets_one():
    def grace(raw: dict[str, Any]) -> int:
        job = render_runner_job(
            group_name="ci", namespace="ns", group_uid="u", spec=parse_spec(raw), job_name="ci-x"
        )
        return int(job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"])

    assert grace(VALID) == 3600
    assert grace({**VALID, "terminationGracePeriod": "90s"}) == 90
    template = {"spec": {"terminationGracePeriodSeconds": 5}}
    assert grace({**VALID, "template": template}) == 5
    assert parse_spec(VALID).retry.on_runner_loss == 1


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("acme/widgets", True),
        ("A-b_c.d/x.y", True),
        ("acme", False),
        ("acme/", False),
        ("/widgets", False),
        ("acme/../admin", False),
        ("../x", False),
        ("acme/wid gets", False),
        ("acme/w%2Fx", False),
        ("acme/widgets?x=1", False),
        ("a/b/c", False),
    ],
)
def test_a_repository_is_owner_slash_name_by_giteas_grammar(text, ok):
    assert is_repository(text) is ok
