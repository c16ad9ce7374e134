"""Tenant isolation, probed as a hostile tenant would: a RunnerGroup author chooses Secret
names and a Gitea URL, and a same-named group may live in another team's namespace."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from gitea_runner_operator.api.naming import runner_prefix
from tests.support import manifests
from tests.support.faulty_gitea import FaultyGitea
from tests.support.testbed import (
    GROUPS,
    allow_secrets,
    delete_namespace,
    group_uid,
    make_namespace,
    make_secret,
    make_tokens,
    ready,
    register_runner,
    registered,
    runner_group,
    runner_jobs,
    sample,
    start_daemon,
    unique,
    wait_until,
)

pytestmark = pytest.mark.integration


def not_ready(kube: Any, ns: str, name: str) -> dict[str, Any]:
    return wait_until(
        lambda: (c := ready(kube_status(kube, ns, name))) and c.get("status") == "False" and c,
        what=f"{name} not ready",
    )


def kube_status(kube: Any, ns: str, name: str) -> dict[str, Any]:
    return kube.get(f"{GROUPS.format(ns=ns)}/{name}").get("status") or {}


@pytest.mark.faults
def test_a_secret_that_did_not_opt_in_is_never_sent_anywhere(
    kube, cluster, team_namespace, gitea_target, start_operator
):
    """Measured before: a group naming an unlabelled db-creds/password had its value sent
    as Authorization to the group's URL."""
    ns = team_namespace
    make_secret(kube, ns, "db-creds", {"password": "hunter2"}, labels={})
    make_secret(kube, ns, "tokens", {"registration": gitea_target.registration_token})
    make_secret(kube, ns, "reg-unlabelled", {"registration": "r"}, labels={})
    make_secret(
        kube, ns, "pinned", {"api": "t", "registration": "r"},
        annotations={"gitea.bpg.pw/gitea-url": "https://gitea.example.com"},
    )  # fmt: skip
    with FaultyGitea(mode="record") as thief:
        start_operator(ns)
        steal = runner_group("steal", target=gitea_target, url=thief.url)
        steal["spec"]["authToken"] = {"secretRef": {"name": "db-creds", "key": "password"}}
        manifests.apply(kube, steal, namespace=ns)
        cond = not_ready(kube, ns, "steal")
        assert cond["reason"] == "SecretNotAllowed"
        assert f"Secret {ns}/db-creds" in cond["message"]
        assert "gitea.bpg.pw/credentials" in cond["message"]

        reg = runner_group("reg", target=gitea_target, url=thief.url)
        reg["spec"]["registrationToken"] = {
            "secretRef": {"name": "reg-unlabelled", "key": "registration"}
        }
        reg["spec"]["authToken"] = {"secretRef": {"name": "pinned", "key": "api"}}
        manifests.apply(kube, reg, namespace=ns)
        cond = not_ready(kube, ns, "reg")
        # The auth Secret opted in, but only for another Gitea: refused before anything else.
        assert cond["reason"] == "SecretNotAllowed"
        assert "https://gitea.example.com" in cond["message"]

        assert max(sample(6, lambda: len(thief.requests))) == 0, thief.requests
        for name in ("steal", "reg"):
            assert runner_jobs(kube, ns, name) == []


@pytest.mark.faults
def test_the_admin_can_restrict_gitea_urls_and_redirects_are_not_followed(
    kube, cluster, team_namespace, gitea_target, start_operator
):
    ns = team_namespace
    make_tokens(kube, ns, cluster, gitea_target)
    with FaultyGitea(mode="record") as elsewhere, FaultyGitea(mode="redirect") as bouncer:
        start_operator(ns, extra=("--allowed-gitea-url", cluster.gitea_url + "/",
                                  "--allowed-gitea-url", bouncer.url))  # fmt: skip
        manifests.apply(
            kube, runner_group("outside", target=gitea_target, url=elsewhere.url), namespace=ns
        )
        cond = not_ready(kube, ns, "outside")
        assert cond["reason"] == "GiteaURLNotAllowed"
        assert cond["message"].startswith("spec.gitea.url")
        manifests.apply(
            kube, runner_group("bounce", target=gitea_target, url=bouncer.url), namespace=ns
        )
        cond = not_ready(kube, ns, "bounce")
        assert cond["reason"] == "GiteaRedirected"
        assert "/stolen" not in cond["message"]  # the Location is never echoed
        assert "redirect (HTTP 302)" in cond["message"]
        assert elsewhere.requests == []
        assert [r.path for r in bouncer.requests if r.path.startswith("/stolen")] == []
        # And the allowed Gitea still works.
        manifests.apply(
            kube, runner_group("inside", target=gitea_target, url=cluster.gitea_url), namespace=ns
        )
        wait_until(
            lambda: ready(kube_status(kube, ns, "inside")).get("status") == "True",
            what="inside ready",
        )


def test_unreachable_gitea_says_no_answer_not_the_socket_error(
    kube, cluster, team_namespace, gitea_target, start_operator
):
    ns = team_namespace
    make_tokens(kube, ns, cluster, gitea_target)
    start_operator(ns)
    manifests.apply(
        kube, runner_group("probe", target=gitea_target, url="http://127.0.0.1:9"), namespace=ns
    )
    cond = not_ready(kube, ns, "probe")
    assert cond["reason"] == "GiteaUnreachable"
    assert "refused" not in cond["message"].lower() and "errno" not in cond["message"].lower()


BUSY_WORKFLOW = """\
name: long
on: [push]
jobs:
  work:
    runs-on: gro-team-b
    steps:
      - run: sleep 25 && echo done
"""


def test_deleting_a_group_leaves_a_same_named_group_of_another_team_untouched(
    kube, gitea, cluster, gitea_target, start_operator, tmp_path
):
    """Measured before: deleting team-a/ci removed both registrations of team-b/ci."""
    org, repo = gitea_target.org, gitea_target.repo
    team_a, team_b = unique("team-a"), unique("team-b")
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        for ns in (team_a, team_b):
            make_namespace(kube, ns)
            allow_secrets(kube, ns)
            make_tokens(kube, ns, cluster, gitea_target)
        operator = start_operator(team_a, team_b)
        for ns in (team_a, team_b):
            manifests.apply(
                kube,
                runner_group("ci", target=gitea_target, url=cluster.gitea_url,
                             labels=["gro-nothing-queued"], drainTimeout="0s"),
                namespace=ns,
            )  # fmt: skip
        prefix_a = runner_prefix("ci", group_uid(kube, team_a, "ci"))
        prefix_b = runner_prefix("ci", group_uid(kube, team_b, "ci"))
        assert prefix_a != prefix_b
        # team-b: one idle and one busy runner; team-a: one idle runner.
        names = {
            "b-idle": (prefix_b + "bcdfg-hjklm", "gro-idle:host"),
            "b-busy": (prefix_b + "ncdfg-hjklm", "gro-team-b:host"),
            "a-idle": (prefix_a + "bcdfg-hjklm", "gro-idle:host"),
        }
        for key, (name, labels) in names.items():
            workdir = tmp_path / key
            workdir.mkdir()
            register_runner(cluster, gitea_target, name, labels, workdir)
            daemons.append(start_daemon(workdir))
        wait_until(
            lambda: all(
                registered(gitea, org).get(n, {}).get("status") == "online"
                for n, _ in names.values()
            ),
            what="all runners online",
        )
        gitea.push_workflow(org, repo, "long.yml", BUSY_WORKFLOW)
        busy_name = names["b-busy"][0]
        wait_until(
            lambda: registered(gitea, org).get(busy_name, {}).get("busy"),
            what="team-b's runner busy",
        )

        kube.delete(f"{GROUPS.format(ns=team_a)}/ci")
        wait_until(
            lambda: names["a-idle"][0] not in registered(gitea, org),
            what="team-a's own registration removed",
        )
        wait_until(
            lambda: not kube.get(f"{GROUPS.format(ns=team_a)}")["items"], what="team-a's group gone"
        )
        after = registered(gitea, org)
        assert names["b-idle"][0] in after
        assert after.get(busy_name, {}).get("busy"), "team-b's busy runner was touched"
        run = gitea.wait_for(
            lambda: next(
                (r for r in gitea.list_runs(org, repo) if r.get("status") == "completed"), None
            ),
            timeout=90,
            what="team-b's workflow finished",
        )
        assert run["conclusion"] == "success", json.dumps(run)
        removed = [
            e for e in operator.log_events() if e.get("event") == "removed leftover registration"
        ]
        assert all(e["group"] == f"{team_a}/ci" for e in removed), removed
    finally:
        for d in daemons:
            d.kill()
            d.wait()
        for ns in (team_a, team_b):
            delete_namespace(kube, ns)
