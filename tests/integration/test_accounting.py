"""Exact accounting on the testbed: an org-scope group and a repo-scope group with the same
labels can both serve the repository's jobs; together they start exactly one runner per
queued job (before: each started one for every job)."""

from __future__ import annotations

import pytest

from tests.support import manifests
from tests.support.builders import workflow
from tests.support.testbed import (
    group_status,
    kwok_image,
    make_tokens,
    runner_group,
    runner_jobs,
    sample,
    wait_until,
)

pytestmark = pytest.mark.integration

FOUR = workflow("four", {f"j{i}": "gro-linux" for i in range(4)})


def test_overlapping_groups_start_one_runner_per_queued_job(
    kube, gitea, cluster, team_namespace, gitea_target, start_operator, kwok
):
    ns, org, repo = team_namespace, gitea_target.org, gitea_target.repo
    make_tokens(kube, ns, cluster, gitea_target)
    gitea.push_workflow(org, repo, "four.yml", FOUR)
    gitea.wait_for_jobs(org, repo, "queued", count=4)
    start_operator(ns)
    # The repository's own group first: it takes what its maximum allows (3 of 4) ...
    manifests.apply(
        kube,
        runner_group("one-repo", target=gitea_target, url=cluster.gitea_url, scope="repo",
                     repo=repo, maxActiveRunners=3, image=kwok_image(600)),
        namespace=ns,
    )  # fmt: skip
    wait_until(lambda: len(runner_jobs(kube, ns, "one-repo")) == 3, what="three repo runners")
    # ... then an org-wide group with room for all: it counts only the job left over.
    manifests.apply(
        kube,
        runner_group("whole-org", target=gitea_target, url=cluster.gitea_url,
                     maxActiveRunners=10, image=kwok_image(600)),
        namespace=ns,
    )  # fmt: skip

    def total() -> int:
        return len(runner_jobs(kube, ns, "whole-org")) + len(runner_jobs(kube, ns, "one-repo"))

    wait_until(lambda: total() == 4, what="four runner Jobs in all")
    seen = sample(15, total)
    by_group = {g: len(runner_jobs(kube, ns, g)) for g in ("whole-org", "one-repo")}
    print(f"\n[accounting] queued=4 runner_jobs={max(seen)} by_group={by_group}")
    assert max(seen) == 4
    assert by_group == {"one-repo": 3, "whole-org": 1}
    queued = {g: group_status(kube, ns, g).get("queuedJobs") for g in ("whole-org", "one-repo")}
    assert sum(queued.values()) == 4, queued
