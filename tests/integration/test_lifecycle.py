"""Clean lifecycle: runners that never start do not churn, registrations left by dead Pods
are removed (only provably ours), and deleting a group tears it down in order."""

from __future__ import annotations

import pytest

from gitea_runner_operator.api.naming import runner_prefix
from tests.support.builders import workflow
from tests.support.testbed import (
    GROUPS,
    condition,
    group_status,
    group_uid,
    kwok_image,
    register_runner,
    registered,
    runner_jobs,
    sample,
    start_daemon,
    wait_until,
)

pytestmark = pytest.mark.integration

WORKFLOW = workflow("slow", {"build": "gro-linux"})


def test_a_runner_that_never_registers_is_reaped_and_not_churned(
    kube, gitea, cluster, team, start_operator, kwok
):
    """Measured before: runner Pods that never took their job were reaped and recreated
    every idleTimeout (6 Jobs in 170 s for 2 queued jobs) with Ready=True and nothing saying
    why. Now: reaped after startupTimeout, a condition names the likely causes, and new
    runners are held back instead of churning."""
    ns, org, repo = team.ns, team.org, team.repo
    gitea.push_workflow(org, repo, "slow.yml", WORKFLOW)
    gitea.wait_for_jobs(org, repo, "queued", count=1)
    start_operator(ns)
    # kwok runs the Pod for an hour but no runner ever registers: it is stuck "starting".
    team.group(
        "stuck", maxActiveRunners=1, idleTimeout="1m", startupTimeout="1m", image=kwok_image(3600)
    )
    first = wait_until(lambda: runner_jobs(kube, ns, "stuck"), what="a runner Job")[0]
    first_name = first["metadata"]["name"]
    wait_until(lambda: not runner_jobs(kube, ns, "stuck"), timeout=120, what="reaped")
    # The operator posts the Event after the Job's deletion: on a loaded machine it lands a
    # moment after the Job is gone, as a user reading the events would see it.
    reaped = wait_until(
        lambda: [
            e
            for e in kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
            if e["reason"] == "RunnerReaped"
        ],
        timeout=30,
        what="the RunnerReaped Event",
    )
    assert first_name in reaped[0]["message"]
    assert "startupTimeout" in reaped[0]["message"]
    healthy = wait_until(
        lambda: (
            (c := condition(group_status(kube, ns, "stuck"), "RunnersHealthy"))
            and c.get("status") == "False"
            and c
        ),
        what="RunnersHealthy False",
    )
    assert healthy["reason"] == "RunnersNotTakingJobs"
    assert "did not register" in healthy["message"]
    # Backing off: no replacement within the next 30 s (the first backoff is 60 s).
    created = sample(30, lambda: len(runner_jobs(kube, ns, "stuck")))
    assert max(created) == 0, created


def test_leftover_registrations_are_removed_only_when_provably_the_groups(
    kube, gitea, cluster, team, start_operator, tmp_path
):
    ns, org = team.ns, team.org
    start_operator(ns)
    team.group("tidy")
    prefix = runner_prefix("tidy", group_uid(kube, ns, "tidy"))
    # Runner Pods that died before taking a job leave ephemeral registrations, offline,
    # which Gitea keeps forever. Make some with the real registration flow.
    leftover = prefix + "bcdfg-hjklm"
    lookalikes = [
        "tidy-bcdfg-hjklm",  # the old naming scheme: a same-named group anywhere
        runner_prefix("tidy", "another-clusters-uid") + "bcdfg-hjklm",
        "someone-elses-runner",
    ]
    for name in (leftover, *lookalikes):
        register_runner(cluster, team.target, name, "gro-linux:host", tmp_path)
        (tmp_path / ".runner").unlink(missing_ok=True)
    wait_until(
        lambda: leftover not in registered(gitea, org),
        timeout=60,
        what="the group's leftover registration removed",
    )
    assert set(lookalikes) <= set(registered(gitea, org))


def test_deleting_a_group_tears_it_down_and_releases_the_finalizer(
    kube, gitea, cluster, team, start_operator, tmp_path
):
    ns, org = team.ns, team.org
    operator = start_operator(ns)
    team.group("bye", drainTimeout="0s")
    group = wait_until(
        lambda: (
            (g := kube.get(f"{GROUPS.format(ns=ns)}/bye"))
            and "gitea.bpg.pw/teardown" in (g["metadata"].get("finalizers") or [])
            and g
        ),
        what="the teardown finalizer",
    )
    # An idle runner of the group, online (its daemon polls Gitea), never given a job.
    name = runner_prefix("bye", group["metadata"]["uid"]) + "bcdfg-hjklm"
    register_runner(cluster, team.target, name, "gro-none:host", tmp_path)
    daemon = start_daemon(tmp_path)
    try:
        wait_until(
            lambda: registered(gitea, org).get(name, {}).get("status") == "online",
            what="idle runner online",
        )
        assert name in registered(gitea, org)  # online: never swept while the group lives
        kube.delete(f"{GROUPS.format(ns=ns)}/bye")
        wait_until(lambda: name not in registered(gitea, org), what="registration removed")
        wait_until(
            lambda: (
                not kube.get(f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups")["items"]
            ),
            what="the group gone (finalizer released)",
        )
        # The object goes as soon as the finalizer patch lands, a moment before the log line.
        wait_until(
            lambda: any(
                e.get("event") == "teardown complete, finalizer released"
                for e in operator.log_events()
            ),
            timeout=10,
            what="the teardown logged",
        )
    finally:
        daemon.kill()
        daemon.wait()


def test_a_group_deleted_while_the_operator_was_down_is_cleaned_up_when_it_returns(
    kube, gitea, cluster, team, start_operator, tmp_path
):
    ns, org = team.ns, team.org
    first = start_operator(ns)
    team.group("later", drainTimeout="0s")
    wait_until(
        lambda: kube.get(f"{GROUPS.format(ns=ns)}/later")["metadata"].get("finalizers"),
        what="finalizer",
    )
    name = runner_prefix("later", group_uid(kube, ns, "later")) + "bcdfg-hjklm"
    register_runner(cluster, team.target, name, "gro-none:host", tmp_path)
    assert first.stop() == 0
    kube.delete(f"{GROUPS.format(ns=ns)}/later")
    # Held by the finalizer while nobody is there to clean up.
    assert kube.get(f"{GROUPS.format(ns=ns)}/later")["metadata"].get("deletionTimestamp")
    start_operator(ns)
    wait_until(lambda: name not in registered(gitea, org), what="registration removed")
    wait_until(
        lambda: not kube.get(f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups")["items"],
        what="the group gone",
    )


BUSY = """\
name: busy
on: [push]
jobs:
  work:
    runs-on: gro-td-busy
    steps:
      - run: sleep 20 && echo done
"""


def test_teardown_removes_idle_runners_at_once_and_lets_a_busy_one_finish(
    kube, gitea, cluster, team, start_operator, tmp_path
):
    ns, org, repo = team.ns, team.org, team.repo
    start_operator(ns)
    team.group("drain", labels=["gro-nothing-queued"], drainTimeout="5m")
    prefix = runner_prefix("drain", group_uid(kube, ns, "drain"))
    idle, busy = prefix + "bcdfg-hjklm", prefix + "ncdfg-hjklm"
    daemons = []
    try:
        for name, labels in ((idle, "gro-idle:host"), (busy, "gro-td-busy:host")):
            workdir = tmp_path / name
            workdir.mkdir()
            register_runner(cluster, team.target, name, labels, workdir)
            daemons.append(start_daemon(workdir))
        gitea.push_workflow(org, repo, "busy.yml", BUSY)
        wait_until(lambda: registered(gitea, org).get(busy, {}).get("busy"), what="busy runner")
        kube.delete(f"{GROUPS.format(ns=ns)}/drain")
        wait_until(lambda: idle not in registered(gitea, org), what="idle removed at once")
        # Gitea's ``busy`` means a report within the last 10 s: the real runner heartbeats
        # every 5 s, but a runner that reports less often (the stand-in: 10 s; a config with a
        # longer state_report_interval) flickers to false during a silent step, so the job in
        # progress, which names the runner, is what keeps its registration alive.
        assert busy in registered(gitea, org), "the busy runner's registration was removed"
        assert kube.get(f"{GROUPS.format(ns=ns)}/drain")["metadata"]["deletionTimestamp"]
        run = gitea.wait_for(
            lambda: next(
                (r for r in gitea.list_runs(org, repo) if r.get("status") == "completed"), None
            ),
            timeout=90,
            what="the busy runner's workflow finished",
        )
        assert run["conclusion"] == "success"
        wait_until(
            lambda: (
                not kube.get(f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups")["items"]
            ),
            timeout=90,
            what="the group gone once drained",
        )
        assert not [n for n in registered(gitea, org) if n.startswith(prefix)]
    finally:
        for daemon in daemons:
            daemon.kill()
            daemon.wait()


def test_teardown_gives_up_after_the_drain_timeout_when_gitea_fails(
    kube, cluster, team, start_operator
):
    from tests.support.faulty_gitea import FaultyGitea

    ns = team.ns
    with FaultyGitea(upstream=cluster.gitea_url) as front:
        start_operator(ns)
        team.group("gone", url=front.url, drainTimeout="5s")
        wait_until(lambda: group_status(kube, ns, "gone").get("lastCheckTime"), what="checked")
        front.mode = "500"
        kube.delete(f"{GROUPS.format(ns=ns)}/gone")
        wait_until(
            lambda: (
                not kube.get(f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups")["items"]
            ),
            timeout=90,
            what="the group let go after the drain timeout",
        )
    events = kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
    incomplete = [e for e in events if e["reason"] == "TeardownIncomplete"]
    assert incomplete and incomplete[0]["type"] == "Warning"
    assert "drainTimeout" in incomplete[0]["message"]
