"""Two operator processes with ``--sharding`` on the real API server, the testbed's Gitea
and kwok's runner Pods: the groups of eight capacity domains are each served by exactly one
replica, each queued job gets exactly one runner Job; then one replica is SIGKILLed and its
domains move to the other once its Lease has lapsed, with no runner Job created twice for
one job and none deleted, and the jobs queued meanwhile wait at most the Lease duration plus
a poll or two.

Who served which group, and when, is read from each replica's log ("groups taken" and
"groups released", debug lines of sharding/leases/round.py, with UTC timestamps); which
runner Jobs and Pods the API server sent each replica, from its "watch added" lines
(kube/informer.py): each replica's watches are narrowed to the shard buckets it holds."""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from typing import Any

import pytest

from gitea_runner_operator.settings import Settings
from tests.support import manifests
from tests.support.builders import workflow
from tests.support.launcher import OperatorProcess
from tests.support.testbed import (
    allow_leases,
    kwok_image,
    make_tokens,
    runner_group,
    runner_jobs,
    sample,
    wait_until,
)
from tests.testbed.kube import KubeClient

pytestmark = pytest.mark.integration

LABELS = [f"gro-s{i}" for i in range(8)]  # one label per group: eight capacity domains
GROUPS = [f"g{i}" for i in range(len(LABELS))]
DEFAULTS = Settings()
DURATION = DEFAULTS.lease_duration  # 15 s: no flag shortens it, so the test takes a minute
RETRY = DEFAULTS.retry_period
POLL = 5  # runner_group's pollInterval


def when(event: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()


def tenures(op: OperatorProcess, ns: str, end: float) -> dict[str, list[tuple[float, float]]]:
    """Group name -> the intervals (epoch seconds) in which ``op`` acted on it; a tenure
    still open ends at ``end`` (now, or the moment the process was killed)."""
    open_: dict[str, float] = {}
    out: dict[str, list[tuple[float, float]]] = {}
    for event in op.log_events():
        kind = event.get("event")
        if kind not in ("groups taken", "groups released"):
            continue
        for key in event.get("groups", []):
            group_ns, _, name = key.partition("/")
            if group_ns != ns:
                continue
            if kind == "groups taken":
                open_[name] = when(event)
            elif name in open_:
                out.setdefault(name, []).append((open_.pop(name), when(event)))
    for name, since in open_.items():
        out.setdefault(name, []).append((since, end))
    return out


def overlaps(a: dict[str, list[tuple[float, float]]], b: dict[str, list[tuple[float, float]]]):
    return [
        (group, x, y)
        for group in set(a) & set(b)
        for x in a[group]
        for y in b[group]
        if x[0] < y[1] and y[0] < x[1]
    ]


def holders(ops: list[OperatorProcess], ns: str) -> dict[str, set[int]]:
    """Group -> the replicas (indexes) acting on it now."""
    now = time.time()
    found: dict[str, set[int]] = {g: set() for g in GROUPS}
    for i, op in enumerate(ops):
        for group, spans in tenures(op, ns, now + 1).items():
            if spans[-1][1] > now and group in found:
                found[group].add(i)
    return found


def queued(gitea: Any, org: str, repo: str) -> dict[str, int]:
    """Group -> the jobs Gitea lists as queued for its label (kwok's runners take none)."""
    jobs = gitea.list_jobs("repo", org, repo, status="queued")
    counts = Counter(label for job in jobs for label in job.get("labels") or ())
    return {g: counts[label] for g, label in zip(GROUPS, LABELS, strict=True)}


def owned_objects(kube: KubeClient, ns: str) -> dict[str, str]:
    """Runner Job and Pod name -> its group."""
    found: dict[str, str] = {}
    for path in (f"/apis/batch/v1/namespaces/{ns}/jobs", f"/api/v1/namespaces/{ns}/pods"):
        for obj in kube.get(path, labelSelector="gitea.bpg.pw/runnergroup-name")["items"]:
            found[obj["metadata"]["name"]] = obj["metadata"]["labels"][
                "gitea.bpg.pw/runnergroup-name"
            ]
    return found


def sent(op: OperatorProcess, ns: str) -> set[str]:
    """The runner Jobs and Pods of ``ns`` whose ADDED event a watch of ``op`` received."""
    return {
        event["object"].partition("/")[2]
        for event in op.log_events()
        if event.get("event") == "watch added"
        and str(event.get("informer", "")).startswith(("jobs", "pods"))
        and str(event.get("object", "")).startswith(f"{ns}/")
    }


def job_names(kube: KubeClient, ns: str) -> dict[str, set[str]]:
    return {g: {j["metadata"]["uid"] for j in runner_jobs(kube, ns, g)} for g in GROUPS}


def test_two_replicas_share_the_domains_and_hand_over_exactly_after_a_sigkill(
    kube, gitea, cluster, team_namespace, gitea_target, start_operator, kwok
):
    ns, org, repo = team_namespace, gitea_target.org, gitea_target.repo
    make_tokens(kube, ns, cluster, gitea_target)
    # The membership Leases live in the test's namespace, so that no other run's members
    # (or a killed one's lapsed Lease) share the ring.
    allow_leases(kube, ns, ["get", "list", "create", "update", "delete"])
    flags = ("--sharding", "--leader-election-namespace", ns)
    ops = [start_operator(ns, extra=flags), start_operator(ns, extra=flags)]
    for group, label in zip(GROUPS, LABELS, strict=True):
        manifests.apply(
            kube,
            runner_group(group, target=gitea_target, url=cluster.gitea_url, labels=[label],
                         maxActiveRunners=4, image=kwok_image(600)),
            namespace=ns,
        )  # fmt: skip
    gitea.push_workflow(org, repo, "first.yml", workflow("first", {x: x for x in LABELS}))
    gitea.wait_for_jobs(org, repo, "queued", count=len(LABELS))

    # Every group is served by exactly one replica, and each job gets one runner Job.
    wait_until(
        lambda: all(len(h) == 1 for h in holders(ops, ns).values()),
        timeout=60,
        what="every group held by exactly one replica",
    )
    wait_until(
        lambda: all(len(j) == 1 for j in job_names(kube, ns).values()),
        timeout=60,
        what="one runner Job per group",
    )
    steady = sample(10, lambda: sum(len(j) for j in job_names(kube, ns).values()))
    assert max(steady) == len(LABELS), steady
    held = holders(ops, ns)
    split = [sorted(g for g, h in held.items() if i in h) for i in range(2)]
    first_jobs = job_names(kube, ns)

    # Each replica was sent the runner Jobs and Pods of its own groups only (issue 46: the
    # API server narrows its watches to the shard buckets it holds), its own all the same.
    objects = owned_objects(kube, ns)
    for i, op in enumerate(ops):
        ever = set(tenures(op, ns, time.time() + 1))
        got = {objects[n] for n in sent(op, ns) if n in objects}
        assert got <= ever, f"replica {i} was sent objects of {sorted(got - ever)}"
        assert set(split[i]) <= got, f"replica {i} never saw {sorted(set(split[i]) - got)}"

    # SIGKILL the replica that serves more: its groups wait for its Lease to lapse.
    victim = 0 if len(split[0]) >= len(split[1]) else 1
    survivor = ops[1 - victim]
    moved = split[victim]
    first_objects = set(objects)
    shares = [len(sent(op, ns) & first_objects) for op in ops]
    ops[victim].kill()
    killed_at = time.time()
    killed_mono = time.monotonic()
    # A push runs every workflow of the repository again: Gitea says how many jobs wait.
    gitea.push_workflow(org, repo, "second.yml", workflow("second", {x: x for x in LABELS}))
    gitea.wait_for_jobs(org, repo, "queued", count=3 * len(LABELS))
    wanted = queued(gitea, org, repo)
    assert all(n >= 2 for n in wanted.values()), wanted
    served_at: dict[str, float] = {}

    def all_served() -> bool:
        for group, uids in job_names(kube, ns).items():
            if len(uids) >= wanted[group] and group not in served_at:
                served_at[group] = time.monotonic() - killed_mono
        return len(served_at) == len(GROUPS)

    limit = DURATION + 2 * RETRY + 2 * POLL + 15
    wait_until(all_served, timeout=limit, what="a runner Job for every job queued since")
    after = sample(10, lambda: job_names(kube, ns))
    # Exactly one runner Job per job, across the hand-over; none deleted, none made twice.
    for seen in after:
        assert {g: len(u) for g, u in seen.items()} == wanted, seen
        for group in GROUPS:
            assert first_jobs[group] <= seen[group], f"a runner Job of {group} went away"

    # The survivor took the victim's groups only after the victim's Lease could lapse,
    # and nobody ever acted on one group at the same time as another.
    # The survivor's narrowed watches took the victim's buckets: it was sent what it made.
    objects = owned_objects(kube, ns)
    made = {n for n, g in objects.items() if g in moved and n not in first_objects}
    assert made and made <= sent(survivor, ns), sorted(made - sent(survivor, ns))

    mine = tenures(survivor, ns, float("inf"))
    theirs = tenures(ops[victim], ns, killed_at)
    assert overlaps(mine, theirs) == []
    assert all(mine[g][-1][1] == float("inf") for g in GROUPS), mine  # it serves all now
    handover = {g: mine[g][-1][0] - killed_at for g in moved}
    # The victim may have renewed up to one retry period before it died.
    assert all(t >= DURATION - RETRY - 0.5 for t in handover.values()), handover
    waits = {g: round(served_at[g], 1) for g in GROUPS}
    assert all(waits[g] < DURATION + 2 * RETRY + 2 * POLL for g in moved), waits
    print(
        f"\n[replicas] runner Jobs and Pods sent to each replica before the kill: {shares}"
        f" of {len(first_objects)}"
    )
    print(
        f"\n[replicas] split={[len(s) for s in split]} killed replica {victim} with {len(moved)}"
        f" groups; taken over after {min(handover.values()):.1f}-{max(handover.values()):.1f} s"
        f"; second job's runner Job after (s): {waits}"
    )
