"""Behaviour meant to be the same on both forges, run against each: Gitea (real, the
testbed's 1.27.3) and Forgejo (the fake of tests/support/fake_forgejo.py, built to the Forgejo 15
reference). Only the way jobs get queued differs: a pushed workflow on Gitea, the fake's
queue on Forgejo."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support import manifests
from tests.support.builders import workflow
from tests.support.fake_forgejo import FakeForgejo
from tests.support.testbed import (
    group_status,
    kwok_image,
    make_secret,
    ready,
    runner_group,
    runner_jobs,
    sample,
    wait_until,
)

pytestmark = pytest.mark.integration

WORKFLOW = workflow(
    "parity",
    {"build-1": "gro-linux", "build-2": "gro-linux", "build-3": "gro-linux", "gpu": "gro-gpu"},
)


@dataclass
class Forge:
    name: str
    url: str
    spec: dict[str, Any]  # what the RunnerGroup needs for this forge, beyond the common part

    def started(self, kube: Any, ns: str, group: str) -> int:
        """Runner Jobs that run (a Forgejo runner Job starts suspended until enrolled)."""
        return sum(
            1 for j in runner_jobs(kube, ns, group) if not (j.get("spec") or {}).get("suspend")
        )


@pytest.fixture(params=["gitea", "forgejo"])
def forge(request, kube, cluster, gitea, team_namespace, gitea_target) -> Iterator[Forge]:
    """A forge with three queued gro-linux jobs and one gro-gpu job, and the team's token
    Secret for it."""
    ns = team_namespace
    if request.param == "gitea":
        make_secret(kube, ns, "tokens", {"registration": gitea_target.registration_token,
                                         "api": cluster.gitea_token})  # fmt: skip
        gitea.push_workflow(gitea_target.org, gitea_target.repo, "parity.yml", WORKFLOW)
        gitea.wait_for_jobs(gitea_target.org, gitea_target.repo, "queued", count=4)
        yield Forge("gitea", cluster.gitea_url, {"org": gitea_target.org})
        return
    fake = FakeForgejo()
    token = fake.add_user("root", admin=True)
    fake.add_org("acme", owners=("root",))
    fake.add_repo("acme", "app")
    for labels in (["gro-linux"], ["gro-linux"], ["gro-linux"], ["gro-gpu"]):
        fake.add_job("acme", "app", labels)
    make_secret(kube, ns, "tokens", {"api": token})
    with fake.in_thread():
        yield Forge(
            "forgejo",
            fake.url,
            {"org": "acme", "gitea": {"url": fake.url, "flavor": "forgejo"},
             "registrationToken": None},
        )  # fmt: skip


def group_for(forge: Forge, target: Any, **extra: Any) -> dict[str, Any]:
    group = runner_group("parity", target=target, url=forge.url, image=kwok_image(300), **extra)
    group["spec"].update(forge.spec)
    with contextlib.suppress(KeyError):
        if group["spec"]["registrationToken"] is None:
            del group["spec"]["registrationToken"]
    return group


def test_one_runner_per_matching_queued_job_up_to_the_maximum(
    forge, kube, team_namespace, gitea_target, start_operator, kwok
):
    ns = team_namespace
    start_operator(ns)
    manifests.apply(kube, group_for(forge, gitea_target, maxActiveRunners=2), namespace=ns)

    wait_until(lambda: forge.started(kube, ns, "parity") == 2, what=f"{forge.name}: 2 runners")
    assert max(sample(10, lambda: len(runner_jobs(kube, ns, "parity")))) == 2
    status = wait_until(
        lambda: (s := group_status(kube, ns, "parity")).get("queuedJobs") == 3 and s,
        what="3 matching jobs queued (the gro-gpu job is not)",
    )
    assert (ready(status)["status"], ready(status)["reason"]) == ("True", "AtCapacity")
    assert status["forge"]["flavor"] == forge.name


def test_raising_the_maximum_adds_exactly_the_missing_runner(
    forge, kube, team_namespace, gitea_target, start_operator, kwok
):
    ns = team_namespace
    start_operator(ns)
    manifests.apply(kube, group_for(forge, gitea_target, maxActiveRunners=1), namespace=ns)
    wait_until(lambda: forge.started(kube, ns, "parity") == 1, what="1 runner")
    manifests.apply(kube, group_for(forge, gitea_target, maxActiveRunners=5), namespace=ns)
    wait_until(lambda: forge.started(kube, ns, "parity") == 3, what="3 runners, one per job")
    assert max(sample(10, lambda: len(runner_jobs(kube, ns, "parity")))) == 3
