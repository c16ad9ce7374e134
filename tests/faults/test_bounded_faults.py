"""Bounded input on the real testbed: a tenant's group points at a loopback server that
answers 200 MiB (``faulty_gitea.py``, mode ``huge``; the real Gitea cannot be made to). The
operator reads at most 16 MiB, says so in the condition, and its memory stays bounded.
Measured before the fix: 88 MiB -> 837 MiB RSS, and the group stayed Ready=True."""

from __future__ import annotations

import time

import pytest

from tests.support import manifests
from tests.support.faulty_gitea import FaultyGitea
from tests.support.testbed import (
    group_status,
    make_tokens,
    ready,
    runner_group,
    sample,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.faults]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_200_mib_answer_costs_bounded_memory_and_shows_as_a_condition(
    kube, cluster, team_namespace, gitea_target, start_operator
):
    ns = team_namespace
    make_tokens(kube, ns, cluster, gitea_target)
    with FaultyGitea(mode="huge") as flood:
        op = start_operator(ns)
        time.sleep(3)
        before = rss_mib(op.proc.pid)
        manifests.apply(
            kube, runner_group("greedy", target=gitea_target, url=flood.url), namespace=ns
        )
        cond = wait_until(
            lambda: (
                (c := ready(group_status(kube, ns, "greedy"))).get("reason")
                == "GiteaAnswerTooLarge"
                and c
            ),
            timeout=90,
            what="GiteaAnswerTooLarge",
        )
        peak = max(sample(20, lambda: rss_mib(op.proc.pid)))  # several more polls
        requests = len(flood.requests)
    print(
        f"\n[faults] 200 MiB answer: rss_before_mib={before:.0f}, rss_peak_mib={peak:.0f}, "
        f"requests={requests}, bytes_sent_mib={flood.huge_sent / 2**20:.0f}"
    )
    assert cond["status"] == "False"
    assert requests >= 2  # polled more than once while we watched memory
    assert peak < before + 80, (before, peak)  # 16 MiB cap plus buffers, never 200 MiB
