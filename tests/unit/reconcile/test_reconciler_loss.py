"""The reconcile records a runner lost while it held a job, once, in the cluster."""

from __future__ import annotations

import json

from gitea_runner_operator.api.loss import LossRecord, LossState
from gitea_runner_operator.api.naming import runner_prefix
from tests.support.fake_cluster import KEY, T0, FakeCluster, make, snapshot


def losses(cluster: FakeCluster) -> dict[str, str]:
    return dict((cluster.status or {}).get("losses") or {})


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
    ((key, value),) = losses(cluster).items()
    assert key == name
    record = json.loads(value)
    assert (record["pod"], record["cause"], record["state"]) == (
        f"{name}-abcde",
        "EvictionByEvictionAPI",
        "lost",
    )
    assert sources.source.woken == 1  # the poll task follows it up now, not in a minute

    before = losses(cluster)
    restarted, _, _ = make(cluster, snapshot(queued=0))
    await restarted.reconcile(KEY)
    assert losses(cluster) == before  # a restart finds the record and writes nothing


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
    assert losses(cluster) == {}


class TightCluster(FakeCluster):
    """Refuses a write that would make the group's annotations or status larger than the API
    server allows (256 KiB of annotations; here the same for status)."""

    LIMIT = 256 * 1024

    async def annotate_group(self, namespace: str, name: str, annotations: dict) -> None:
        after = {**self.annotations, **annotations}
        if len(json.dumps(after)) > self.LIMIT:
            raise RuntimeError("metadata.annotations: Too long: must have at most 262144 bytes")
        await super().annotate_group(namespace, name, annotations)

    async def patch_group_status(self, namespace: str, name: str, status: dict) -> None:
        losses = {**((self.status or {}).get("losses") or {}), **(status.get("losses") or {})}
        if status.get("losses") and len(json.dumps(losses)) > self.LIMIT:
            raise RuntimeError("status: Too long")
        await super().patch_group_status(namespace, name, status)


async def test_a_flood_of_losses_never_stops_creation():
    """2,500 evicted busy runners used to give 0 runners for the queued jobs: every pass
    failed writing one more record before it created."""
    cluster = TightCluster()
    first, _, _ = make(cluster, snapshot(queued=1))
    await first.reconcile(KEY)
    cluster.sync()
    (name,) = cluster.jobs
    cluster.jobs[name]["metadata"]["annotations"]["gitea.bpg.pw/took-job"] = "true"
    cluster.gone_pods.append(_evicted(f"{name}-abcde", name))
    prefix = runner_prefix("ci", "u1")
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    flood = {}
    for i in range(2500):
        job = prefix + "".join(alphabet[(i // 27**k) % 27] for k in range(5))
        flood[job] = LossRecord(
            f"{job}-bcdfg", "EvictionByEvictionAPI", T0 + i, LossState.HELD, "acme/widgets", i, i
        ).encode()
    cluster.annotations = {f"runner-loss.gitea.bpg.pw/{k}": v for k, v in flood.items()}
    cluster.status = {**(cluster.status or {}), "losses": flood}
    again, _, _ = make(cluster, snapshot(queued=3))
    await again.reconcile(KEY)
    assert cluster.all_created > 1  # the alive lost runner holds one slot of three
