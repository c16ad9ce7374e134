"""``gitea-runner-operator why <job URL>``: the explanation a user reads, from the groups'
spec and status and the job, with the cluster and Gitea faked at the edge."""

from __future__ import annotations

import datetime as dt
import io
from typing import Any

import pytest

from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.cli import main as cli_main
from gitea_runner_operator.commands.why import JobRef, UsageError, group_views, main, parse_job_url
from gitea_runner_operator.forge.errors import GiteaNotFound
from gitea_runner_operator.reconcile.why.explain import explain, render
from tests.support.builders import spec_with

GITEA = "https://gitea.example.com"
NOW = dt.datetime(2026, 1, 1, 0, 12, tzinfo=dt.UTC)


def job(labels=("ubuntu-latest",), repo="acme/widgets", status="queued", i=42) -> ActionJob:
    return ActionJob(
        id=i,
        name="build",
        labels=labels,
        status=status,
        url=f"{GITEA}/api/v1/repos/{repo}/actions/jobs/{i}",
        created_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    )


def ready(status: str = "True", reason: str = "Polling", message: str = "") -> dict[str, str]:
    return {"type": "Ready", "status": status, "reason": reason, "message": message}


def group(name: str, namespace: str = "team-a", status: dict[str, Any] | None = None,
          **spec: Any) -> dict[str, Any]:  # fmt: skip
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec_with(**spec),
        "status": status if status is not None else {"activeRunners": 0, "conditions": [ready()]},
    }


REPO = group("widgets")  # repo acme/widgets; ubuntu-latest, app-infra; max 3
ORG = group("org", "platform", scope="org", org="acme", repo=None)
FULL = group("widgets", status={
    "activeRunners": 3, "runners": {"starting": 0, "idle": 0, "busy": 3},
    "conditions": [ready("True", "AtCapacity")],
    "waiting": {"startingRunner": 0, "atCapacity": 2,
                "heldBack": {"count": 0, "reason": "", "condition": ""},
                "servedByPeer": {"count": 0, "groups": []}},
})  # fmt: skip
REFUSED = group("widgets", status={
    "activeRunners": 0,
    "conditions": [ready(), {"type": "RunnersHealthy", "status": "False",
                             "reason": "JobCreateRefused", "message": "exceeded quota: runners"}],
    "waiting": {"startingRunner": 0, "atCapacity": 0,
                "heldBack": {"count": 1, "reason": "JobCreateRefused",
                             "condition": "RunnersHealthy"},
                "servedByPeer": {"count": 0, "groups": []}},
})  # fmt: skip


@pytest.mark.parametrize(
    ("the_job", "groups", "could", "should", "said"),
    [
        (job(), [REPO], ["team-a/widgets"], "team-a/widgets", "a runner should take it"),
        (job(("ubuntu-lastest",)), [REPO], [], None, "did you mean 'ubuntu-latest'"),
        (job(repo="acme/other"), [REPO], [], None, "no group's scope covers its repository"),
        (job(), [ORG, REPO], ["platform/org", "team-a/widgets"], "team-a/widgets", "should"),
        (job(repo="acme/other"), [ORG, REPO], ["platform/org"], "platform/org", "should"),
        (job(), [FULL], ["team-a/widgets"], "team-a/widgets", "at maxActiveRunners (3 of 3"),
        (job(), [FULL, ORG], ["platform/org", "team-a/widgets"], "platform/org",
         "passed over: team-a/widgets"),
        (job(), [REFUSED], ["team-a/widgets"], "team-a/widgets", "JobCreateRefused"),
        (job(status="waiting"), [REPO], ["team-a/widgets"], "team-a/widgets", "not queued"),
        (job(), [group("x", gitea={"url": "https://other.example.com"})], [], None,
         "no RunnerGroup uses this Gitea"),
    ],
)  # fmt: skip
def test_the_explanation_names_who_could_who_should_and_what_holds_the_job(
    the_job, groups, could, should, said
):
    e = explain(the_job, GITEA, group_views(groups))
    assert list(e.could) == could
    assert e.should == should
    assert said in render(e, NOW)


def test_a_starting_runner_is_on_its_way_not_holding_the_job_back():
    starting = group("widgets", status={
        "activeRunners": 1, "runners": {"starting": 1, "idle": 0, "busy": 0},
        "conditions": [ready()],
        "waiting": {"startingRunner": 1, "atCapacity": 0,
                    "heldBack": {"count": 0, "reason": "", "condition": ""},
                    "servedByPeer": {"count": 0, "groups": []}},
    })  # fmt: skip
    e = explain(job(), GITEA, group_views([starting]))
    text = render(e, NOW)
    assert e.holds == () and "Holding it back" not in text
    assert "On its way:\n  team-a/widgets: 1 runner(s) starting or idle" in text
    assert text.endswith("a runner should take it within a poll interval")


def test_a_group_that_cannot_serve_the_job_says_why_not():
    gpu = group("gpu", labels=["gpu"])
    text = render(explain(job(("ubuntu-lastest",)), GITEA, group_views([REPO, gpu])), NOW)
    assert "team-a/widgets: it does not offer 'ubuntu-lastest' (it offers 'ubuntu-latest')" in text
    assert "Queued at 2026-01-01T00:00:00Z (12 min ago)" in text


def test_a_sharded_operator_names_the_domain_and_the_replica_serving_the_group():
    served = {"id": "d-0123456789ab", "servedBy": "gro-5f7c9-x2x7q_1a2b3c4d", "spans": "family"}
    status = {"activeRunners": 0, "conditions": [ready()], "domain": served}
    text = render(explain(job(), GITEA, group_views([group("widgets", status=status)])), NOW)
    assert (
        "Should serve it: team-a/widgets (the most specific scope, then spare capacity)\n"
        "  served by replica gro-5f7c9-x2x7q_1a2b3c4d, domain d-0123456789ab (the groups "
        "that can take the same jobs)"
    ) in text
    whole = {**status, "domain": {**served, "spans": "gitea"}}
    text = render(explain(job(), GITEA, group_views([group("widgets", status=whole)])), NOW)
    assert "(every RunnerGroup of its Gitea, as a scope: global group joins all its families)" in (
        text
    )
    # One replica (no --sharding) writes no domain, and why says nothing of one.
    assert "served by" not in render(explain(job(), GITEA, group_views([REPO])), NOW)


@pytest.mark.parametrize(
    ("url", "ref"),
    [
        (f"{GITEA}/api/v1/repos/acme/widgets/actions/jobs/42",
         JobRef(GITEA, "acme", "widgets", 42)),
        (f"{GITEA}/git/acme/widgets/actions/runs/7/jobs/1",
         JobRef(f"{GITEA}/git", "acme", "widgets", 1, run=7)),
    ],
)  # fmt: skip
def test_job_urls_are_read_from_the_api_and_from_the_web_ui(url, ref):
    assert parse_job_url(url) == ref


def test_a_url_that_names_no_job_is_refused_with_the_forms_that_work():
    with pytest.raises(UsageError, match="actions/jobs/ID"):
        parse_job_url(f"{GITEA}/acme/widgets")


def run_why(argv, groups, found: ActionJob | Exception):
    asked: list[tuple[JobRef, str]] = []

    async def read_groups():
        return groups

    async def read_job(ref, token):
        asked.append((ref, token))
        if isinstance(found, Exception):
            raise found
        return found

    out = io.StringIO()
    code = main(argv, read_groups=read_groups, read_job=read_job, out=out)
    return code, out.getvalue(), asked


def test_why_prints_the_explanation_and_sends_the_token_only_to_the_job_read(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    url = f"{GITEA}/api/v1/repos/acme/widgets/actions/jobs/42"
    code, text, asked = run_why([url, "--token-file", str(token_file)], [ORG, REPO], job())
    assert code == 0
    assert asked == [(JobRef(GITEA, "acme", "widgets", 42), "s3cret-token")]
    assert "Could serve it: platform/org, team-a/widgets" in text
    assert "Should serve it: team-a/widgets" in text
    assert "s3cret" not in text


def test_why_says_so_when_gitea_does_not_give_the_job(capsys):
    url = f"{GITEA}/api/v1/repos/acme/widgets/actions/jobs/42"
    code, text, _ = run_why([url, "--token", "t"], [REPO], GiteaNotFound("404 on the job"))
    assert code == 1 and text == ""
    assert "Gitea did not give the job" in capsys.readouterr().err


def test_why_is_a_subcommand_of_the_operator_and_needs_a_token(capsys):
    with pytest.raises(SystemExit):
        cli_main(["why", f"{GITEA}/api/v1/repos/acme/widgets/actions/jobs/42"])
    assert "--token" in capsys.readouterr().err


async def test_the_job_is_read_from_gitea_by_id_or_by_its_place_in_the_run():
    from aioresponses import aioresponses

    from gitea_runner_operator.commands.why import job_from_gitea

    payload = {"id": 42, "status": "queued", "labels": ["ubuntu-latest"], "name": "build"}
    read = job_from_gitea()
    with aioresponses() as served:
        served.get(f"{GITEA}/api/v1/repos/acme/widgets/actions/jobs/42", payload=payload)
        run = {"jobs": [{**payload, "id": 41}, payload], "total_count": 2}
        served.get(
            f"{GITEA}/api/v1/repos/acme/widgets/actions/runs/7/jobs", payload=run, repeat=True
        )
        by_id = await read(JobRef(GITEA, "acme", "widgets", 42), "tok")
        by_place = await read(JobRef(GITEA, "acme", "widgets", 1, run=7), "tok")
        with pytest.raises(UsageError, match="no job number 5"):
            await read(JobRef(GITEA, "acme", "widgets", 5, run=7), "tok")
        sent = [call.kwargs["headers"]["Authorization"] for calls in served.requests.values()
                for call in calls]  # fmt: skip
    assert by_id.id == 42 and by_place.id == 42
    assert set(sent) == {"token tok"}
