from gitea_runner_operator.reconcile.status.conditions import (
    Problem,
    desired_status,
    merge_conditions,
    ready_condition,
    runners_healthy_condition,
    status_differs,
)


def test_ready_explains_capacity_and_problems():
    assert ready_condition(None, demand=2, alive=1, max_active=5)["reason"] == "Polling"
    full = ready_condition(None, demand=9, alive=3, max_active=3)
    assert (full["status"], full["reason"]) == ("True", "AtCapacity")
    bad = ready_condition(
        Problem("SecretNotFound", "spec.authToken.secretRef: ..."), demand=0, alive=0, max_active=1
    )
    assert (bad["status"], bad["reason"]) == ("False", "SecretNotFound")
    assert "spec.authToken" in bad["message"]


def test_transition_time_moves_only_when_status_flips():
    ok = ready_condition(None, demand=0, alive=0, max_active=1)
    first = desired_status(
        previous=None,
        generation=1,
        active=0,
        queued=0,
        last_check_time="t1",
        ready=ok,
        now_iso="T1",
    )
    again = desired_status(
        previous=first,
        generation=1,
        active=0,
        queued=0,
        last_check_time="t1",
        ready=ok,
        now_iso="T2",
    )
    assert again["conditions"][0]["lastTransitionTime"] == "T1"
    assert not status_differs(first, again)
    bad = ready_condition(Problem("GiteaUnreachable", "x"), demand=0, alive=0, max_active=1)
    failed = desired_status(
        previous=again,
        generation=1,
        active=0,
        queued=None,
        last_check_time=None,
        ready=bad,
        now_iso="T3",
    )
    assert failed["conditions"][0]["lastTransitionTime"] == "T3"
    # Figures from the last good check are kept, not zeroed, while Gitea cannot be asked.
    assert failed["queuedJobs"] == 0 and failed["lastCheckTime"] == "t1"
    assert status_differs(again, failed)


def test_failed_runner_jobs_are_reported_with_a_hint():
    healthy = runners_healthy_condition()
    assert (healthy["type"], healthy["status"]) == ("RunnersHealthy", "True")
    failing = runners_healthy_condition(failed_jobs=["ci-b", "ci-a", "ci-c", "ci-d"])
    assert (failing["status"], failing["reason"]) == ("False", "RunnerJobsFailed")
    assert failing["message"].startswith("4 runner Job(s) failed (ci-a; ci-b; ci-c; ...)")
    assert "spec.registrationToken" in failing["message"]


def test_the_most_actionable_runner_problem_wins():
    both = runners_healthy_condition(
        failed_jobs=["ci-a"], start_failures=["Pod p: ErrImagePull"], create_error="quota"
    )
    assert both["reason"] == "JobCreateRefused"
    pods = runners_healthy_condition(failed_jobs=["ci-a"], start_failures=["Pod p: ErrImagePull"])
    assert pods["reason"] == "RunnerPodsNotStarting" and "ErrImagePull" in pods["message"]


def test_a_new_last_check_time_alone_is_never_written():
    prev = {"lastCheckTime": "2026-01-01T00:00:00Z", "activeRunners": 1}
    assert not status_differs(prev, {**prev, "lastCheckTime": "2026-01-01T05:00:00Z"})
    # It goes out with the next real change, and with the first status.
    assert status_differs(
        prev, {**prev, "lastCheckTime": "2026-01-01T05:00:00Z", "activeRunners": 2}
    )
    assert status_differs({"activeRunners": 1}, {**prev, "activeRunners": 1})


def test_conditions_not_recomputed_are_kept():
    prev = [{"type": "RunnersHealthy", "status": "False", "reason": "RunnerJobsFailed"}]
    merged = merge_conditions(prev, [{"type": "Ready", "status": "False"}], "t")
    assert [c["type"] for c in merged] == ["Ready", "RunnersHealthy"]


def test_a_cut_queue_never_reports_zero_as_the_whole_truth():
    cond = ready_condition(None, demand=0, alive=0, max_active=3, complete=False)
    assert (cond["status"], cond["reason"]) == ("True", "QueuePartiallyRead")
    assert "at least 0" in cond["message"]


def test_reconciling_and_stalled_are_never_both_true():
    """kstatus takes the first True one it meets in the list: both at once would read as
    in progress or failed by their order, not by the group's state."""
    from gitea_runner_operator.api.observation import ProblemKind
    from gitea_runner_operator.reconcile.status.conditions import progress_conditions, stalls

    problems = [
        None,
        Problem("InvalidSpec", "spec.x", ProblemKind.CONFIG),
        Problem("SecretNotFound", "spec.authToken", ProblemKind.SECRET),
        Problem("GiteaUnreachable", "refused", ProblemKind.GITEA),
        Problem("SecretReadFailed", "retrying", ProblemKind.CLUSTER),
    ]
    previous = [None, {"observedGeneration": 1}, {"observedGeneration": 2}]
    for problem in problems:
        ready = ready_condition(problem, demand=0, alive=0, max_active=1)
        for prev in previous:
            for since in (None, 0.0, -3600.0):
                stalled = stalls(problem, since=since, now=0.0, previous=prev)
                conds = progress_conditions(prev, 2, ready, problem, stalled=stalled)
                assert len(conds) <= 1
                if ready["status"] == "True":
                    assert conds == []  # Ready needs neither
                if stalled:
                    assert conds[0]["reason"] == ready["reason"]
                    assert conds[0]["message"] == ready["message"]
                if problem is not None and problem.kind.backs_off:
                    assert not stalled  # Gitea and the API server heal by themselves
