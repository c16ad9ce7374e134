"""Two ``--sharding`` operator processes on the testbed's API server, with Gitea delivering
``workflow_job`` to one of them only: a job for a group the *other* replica serves gets its
runner Job within seconds, though the groups poll every 5 minutes, because the replica Gitea
reached hands the delivery to the one serving the group (sharding/forwards.py,
webhook/forwarding.py). Each process publishes ``POD_IP`` (here 127.0.0.1) and its webhook
port in its membership Lease, as the chart's Pods do."""

from __future__ import annotations

import secrets
import time
from typing import Any

import pytest

from tests.support import manifests
from tests.support.builders import workflow
from tests.support.launcher import OperatorProcess
from tests.support.testbed import (
    allow_leases,
    group_status,
    make_tokens,
    runner_group,
    runner_jobs,
    wait_until,
)
from tests.testbed.gitea_api import GiteaAPI
from tests.testbed.kube import KubeClient

pytestmark = pytest.mark.integration

LABELS = [f"gro-f{i}" for i in range(8)]  # one label per group: eight capacity domains
GROUPS = [f"f{i}" for i in range(len(LABELS))]
POLL = "5m"  # only a forwarded delivery can start a runner within the test's bound
BOUND = 30.0  # seconds from the push to the runner Job: far below one poll interval


def served(op: OperatorProcess, ns: str) -> set[str]:
    """The groups ``op`` has taken (nothing is released in this test)."""
    return {
        key.partition("/")[2]
        for event in op.log_events()
        if event.get("event") == "groups taken"
        for key in event.get("groups", [])
        if key.partition("/")[0] == ns
    }


def webhook_port(op: OperatorProcess) -> int:
    return int(op.args[op.args.index("--webhook-port") + 1])


def forwards(op: OperatorProcess, outcome: str) -> float:
    return sum(
        value
        for (name, labels), value in op.metrics().items()
        if name.endswith("webhook_forwards_total") and dict(labels).get("outcome") == outcome
    )


def test_a_delivery_to_the_replica_not_serving_the_group_starts_its_runner_at_once(
    kube: KubeClient,
    gitea: GiteaAPI,
    cluster: Any,
    team_namespace: str,
    gitea_target: Any,
    start_operator: Any,
    tmp_path: Any,
) -> None:
    ns, org, repo = team_namespace, gitea_target.org, gitea_target.repo
    make_tokens(kube, ns, cluster, gitea_target)
    allow_leases(kube, ns, ["get", "list", "create", "update", "delete"])
    secret_file = tmp_path / "webhook-secret"
    secret_file.write_text(secrets.token_hex(16) + "\n")
    flags = (
        "--sharding",
        "--leader-election-namespace", ns,
        "--webhook-secret-file", str(secret_file),
    )  # fmt: skip
    env = {"POD_IP": "127.0.0.1"}
    ops = [start_operator(ns, extra=flags, env=env), start_operator(ns, extra=flags, env=env)]
    for group, label in zip(GROUPS, LABELS, strict=True):
        manifests.apply(
            kube,
            runner_group(group, target=gitea_target, url=cluster.gitea_url, labels=[label],
                         pollInterval=POLL, image="x"),
            namespace=ns,
        )  # fmt: skip
    wait_until(
        lambda: served(ops[0], ns) | served(ops[1], ns) == set(GROUPS),
        timeout=60,
        what="every group served by a replica",
    )
    shares = [served(op, ns) for op in ops]
    assert not shares[0] & shares[1], shares
    # Gitea delivers to the replica serving fewer groups; the job is for one of the other's.
    receiver = 0 if len(shares[0]) <= len(shares[1]) else 1
    server = ops[1 - receiver]
    # The receiver may serve none of the eight (1 run in 128): it forwards all the same.
    assert shares[1 - receiver], shares
    target = sorted(shares[1 - receiver])[0]
    label = LABELS[GROUPS.index(target)]
    # Every group's first poll is done: the next is 5 minutes away.
    wait_until(
        lambda: all(group_status(kube, ns, g).get("lastCheckTime") for g in GROUPS),
        timeout=60,
        what="every group's first poll",
    )
    made = gitea.create_webhook(
        f"http://127.0.0.1:{webhook_port(ops[receiver])}/hooks/gitea",
        owner=org,
        secret=secret_file.read_text().strip(),
    )
    try:
        pushed = time.monotonic()
        gitea.push_workflow(org, repo, "ci.yml", workflow("ci", {"build": label}))
        wait_until(
            lambda: runner_jobs(kube, ns, target),
            timeout=BOUND,
            what=f"a runner Job for {target}, served by the replica Gitea did not reach",
        )
        took = time.monotonic() - pushed
    finally:
        gitea.delete(f"/orgs/{org}/hooks/{made['id']}")

    forwarded = [
        e for e in ops[receiver].log_events() if e.get("event") == "webhook delivery forwarded"
    ]
    assert forwarded, "the receiving replica forwarded nothing"
    assert forwarded[0]["peer"] == f"127.0.0.1:{webhook_port(server)}"
    assert forwarded[0]["groups"] == [f"{ns}/{target}"]
    assert forwards(ops[receiver], "sent") >= 1
    assert forwards(ops[receiver], "failed") == forwards(ops[receiver], "dropped") == 0
    woken = [
        e
        for e in server.log_events()
        if e.get("event") == "webhook delivery accepted" and f"{ns}/{target}" in e.get("woken", [])
    ]
    assert woken, "the serving replica never woke the group"
    # The receiving replica never created a runner Job of the group it does not serve.
    assert not any(
        e.get("event") == "groups taken" and f"{ns}/{target}" in e.get("groups", [])
        for e in ops[receiver].log_events()
    )
    print(f"\n[forwarding] {target} served by replica {1 - receiver}: runner Job {took:.1f} s")
