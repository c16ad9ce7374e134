"""The reconcile records a runner lost while it held a job, once, in the cluster."""

from __future__ import annotations

import json

from gitea_runner_operator.api.loss import LOSS_ANNOTATION_PREFIX
from tests.unit.test_reconciler import KEY, FakeCluster, make, snapshot


def _evicted(pod: str, job: str) -> dict:
    return {
        "metadata": {
            "name": pod,
            "labels": {"batch.kubernetes.io/job-name": job},
            "deletionTimestamp": "2026-01-01T00:00:20Z",
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
            ],
        },
    }


async def test_a_busy_runner_evicted_and_gone_from_the_cache_is_recorded_once():
    cluster = FakeCluster()
    first, _, _ = make(cluster, snapshot(queued=1))
    await first.reconcile(KEY)
    cluster.sync()
    (name,) = cluster.jobs
    cluster.jobs[name]["metadata"]["annotations"]["gitea.bpg.pw/took-job"] = "true"
    # the Pod was evicted and deleted before the reconcile ran: only its last state is left
    cluster.gone_pods.append(_evicted(f"{name}-abcde", name))

    again, sources, _ = make(cluster, snapshot(queued=0))
    await again.reconcile(KEY)
    ((key, value),) = cluster.annotations.items()
    assert key == LOSS_ANNOTATION_PREFIX + name
    record = json.loads(value)
    assert (record["pod"], record["cause"], record["state"]) == (
        f"{name}-abcde",
        "EvictionByEvictionAPI",
        "lost",
    )
    assert sources.source.woken == 1  # the poll task follows it up now, not in a minute

    before = dict(cluster.annotations)
    restarted, _, _ = make(cluster, snapshot(queued=0))
    await restarted.reconcile(KEY)
    assert cluster.annotations == before  # a restart finds the record and writes nothing


async def test_an_idle_runner_deleted_is_no_loss():
    cluster = FakeCluster()
    first, _, _ = make(cluster, snapshot(queued=1))
    await first.reconcile(KEY)
    cluster.sync()
    (name,) = cluster.jobs
    gone = _evicted(f"{name}-abcde", name)
    gone["status"]["conditions"] = []  # deleted (reaped), not evicted
    cluster.gone_pods.append(gone)
    again, _, _ = make(cluster, snapshot(queued=0))
    await again.reconcile(KEY)
    assert cluster.annotations == {}
