"""One tenant's groups together hold at most its namespace's share of the process-wide memory
budget for tenants' Gitea answers, charged while the answers are read and parsed and while
they are kept (kit/tenant_budget.py, forge/budget.py); another namespace still polls.

Before: each answer and each observation was bounded on its own, not their sum: five groups of
one tenant, each within every cap, kept 354 MiB and peaked at 603 MiB of RSS."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aioresponses import aioresponses

from gitea_runner_operator.api.runnergroup import parse_spec
from gitea_runner_operator.kit.tenant_budget import (
    MIB,
    UNLIMITED_BUDGET,
    OverShare,
    TenantBudget,
    default_budget,
    memory_limit,
)
from gitea_runner_operator.poll.observer import Observer
from tests.support.builders import VALID
from tests.support.gitea_answers import ORG_SPEC, FakeSecrets, evil_gitea, evil_spec, gitea


async def test_five_groups_of_one_namespace_at_the_caps_hold_at_most_its_share(sessions):
    budget = TenantBudget(8 * MIB)
    observer = Observer(
        FakeSecrets({"evil": "t-evil", "team": "t-team"}),  # type: ignore[arg-type]
        sessions,
        tenant_budget=budget,
        max_pages=40,  # 40 pages of about 170 KiB: 6.6 MiB per group, 33 MiB for five
    )
    with aioresponses() as mock:
        evil_gitea(mock)
        gitea(mock)
        results = await asyncio.gather(
            *(observer.observe("evil", evil_spec(n)) for n in range(5)),
            observer.observe("team", parse_spec(ORG_SPEC)),
        )
    share = budget.total // 2
    assert budget.peak["evil"] <= share  # read, parsed and kept, all five together
    refused = [s.problem for s, _ in results[:5] if s.problem is not None]
    assert refused and all(p.reason == "TenantMemoryBudget" for p in refused)
    assert "MiB" in refused[0].message and "memory budget" in refused[0].message
    team, _ = results[5]
    assert team.problem is None and team.observation is not None  # another tenant polls
    # Nothing leaks: once the scopes are forgotten, nothing is held by anyone.
    await observer.drop(set())
    assert budget.held("evil") == budget.held("team") == 0


async def test_what_a_fetch_reads_is_released_and_only_what_it_keeps_stays(sessions):
    budget = TenantBudget(64 * MIB)
    observer = Observer(
        FakeSecrets({"evil": "t-evil"}),  # type: ignore[arg-type]
        sessions,
        tenant_budget=budget,
        max_pages=4,
    )
    with aioresponses() as mock:
        evil_gitea(mock)
        snapshot, _ = await observer.observe("evil", evil_spec(0))
        assert snapshot.observation is not None and snapshot.observation.queued  # 4 pages read
        kept = budget.held("evil")
        # The peak (bodies read and parsed) was well above what stays.
        assert 0 < kept < budget.peak["evil"]
        again, _ = await observer.observe("evil", evil_spec(0), newer_than=float("inf"))
        assert again.observation is not None
        # The new answer replaced the old one's charge (the first also held a sample of
        # running and finished jobs, taken once a minute), not added to it.
        assert 0 < budget.held("evil") <= kept
    await observer.drop(set())
    assert budget.held("evil") == 0


def test_the_budget_comes_from_the_containers_memory_limit(tmp_path: Path):
    v2 = tmp_path / "memory.max"
    v2.write_text("402653184\n")  # the chart's 384 Mi
    assert memory_limit((v2,)) == 384 * MIB
    assert default_budget(384 * MIB) == int(384 * MIB * 0.4)
    v2.write_text("max\n")
    assert memory_limit((v2,)) is None
    assert default_budget(None) == UNLIMITED_BUDGET
    assert memory_limit((tmp_path / "missing",)) is None


def test_the_limit_is_the_processs_own_cgroups_where_the_mount_shows_the_whole_tree(
    tmp_path: Path,
):
    """Without a cgroup namespace (a cgroup made for the operator on a host, v1 or v2) the
    mount's root file is the host's, unlimited: the budget would be the unlimited one."""
    v1 = tmp_path / "memory"
    v2 = tmp_path / "unified"
    mounts = (v2 / "memory.max", v1 / "memory.limit_in_bytes")
    for root in (v1 / "pods" / "operator", v2 / "pods" / "operator"):
        root.mkdir(parents=True)
    mounts[0].write_text("max\n")
    mounts[1].write_text("9223372036854771712\n")
    (v1 / "pods" / "memory.limit_in_bytes").write_text(f"{1024 * MIB}\n")
    (v1 / "pods" / "operator" / "memory.limit_in_bytes").write_text(f"{384 * MIB}\n")
    proc = tmp_path / "cgroup"
    proc.write_text("5:cpu,cpuacct:/elsewhere\n4:memory:/pods/operator\n0::/\n")
    assert memory_limit(proc_cgroup=proc, mounts=mounts) == 384 * MIB
    (v1 / "pods" / "operator" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert memory_limit(proc_cgroup=proc, mounts=mounts) == 1024 * MIB  # the one above
    (v2 / "pods" / "operator" / "memory.max").write_text(f"{256 * MIB}\n")
    proc.write_text("0::/pods/operator\n")
    assert memory_limit(proc_cgroup=proc, mounts=mounts) == 256 * MIB
    proc.write_text("0::/\n")  # a cgroup namespace: the mount's root is the container's
    assert memory_limit(proc_cgroup=proc, mounts=mounts) is None
    assert memory_limit(proc_cgroup=tmp_path / "missing", mounts=mounts) is None


def test_a_share_is_the_budget_divided_by_the_namespaces_that_poll():
    clock = [0.0]
    budget = TenantBudget(100, active_for=60, clock=lambda: clock[0])
    budget.charge("a", 100)  # alone, it may hold it all
    budget.release("a", 100)
    budget.note("b")
    assert budget.share() == 50
    clock[0] = 120.0  # b stopped polling long ago
    assert budget.share() == 100
    assert VALID  # the builders are importable alongside


def test_a_label_text_is_kept_once_however_many_jobs_carry_it():
    """2,000 queued jobs of the same 64 labels of 45 characters kept 14.3 MiB, now 2.9 MiB:
    each label text is one string, and the budget counts it once."""
    from gitea_runner_operator.api.gitea import JobList
    from gitea_runner_operator.api.observation import Observation
    from gitea_runner_operator.forge.budget import kept_size

    labels = [f"label-{k:02d}-".ljust(45, "x") for k in range(64)]
    pages = [
        json.loads(json.dumps({"jobs": [{"id": i, "status": "queued", "labels": labels}]}))
        for i in (1, 2)
    ]
    first, second = (JobList.model_validate(page).jobs[0] for page in pages)  # type: ignore[index]
    assert all(a is b for a, b in zip(first.labels, second.labels, strict=True))
    one = kept_size(Observation(queued=(first,), runners=()))
    two = kept_size(Observation(queued=(first, second), runners=()))
    assert two - one < one / 2  # the second job's labels are pointers, not copies


def test_a_busy_namespace_among_a_thousand_quiet_ones_borrows_beyond_an_equal_share():
    """An equal share of the chart's budget among 1,000 namespaces is 154 KiB, less than one
    page of 50 jobs read and parsed; the quiet ones hold a few hundred bytes each."""
    budget = TenantBudget(int(384 * MIB * 0.4))
    for n in range(1000):
        budget.charge(f"quiet-{n}", 300)
    assert budget.guaranteed() < 80 * 1024
    budget.charge("busy", 4 * MIB)  # a few pages of a long queue, read and parsed
    assert budget.held("busy") == 4 * MIB


def test_borrowers_cannot_take_what_each_namespace_is_guaranteed():
    budget = TenantBudget(100 * MIB)
    for ns in ("a", "b", "c", "d", "e"):
        budget.note(ns)
    guaranteed = budget.guaranteed()  # 50 MiB reserved among 5: 10 MiB each
    assert guaranteed == 10 * MIB
    for greedy in ("a", "b", "c", "d"):  # each takes its part and a quarter of the pool
        budget.charge(greedy, budget.share())
    with pytest.raises(OverShare, match="borrow"):
        budget.charge("e", guaranteed + 1)  # the pool is spent: no borrowing
    budget.charge("e", guaranteed)  # but its guaranteed part is there
    assert sum(budget.held(ns) for ns in "abcde") <= budget.total
