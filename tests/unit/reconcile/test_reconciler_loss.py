"""The reconcile records a runner lost while it held a job, once, in the cluster."""

from __future__ import annotations

import json

from gitea_runner_operator.api.loss import LossRecord, LossState
from gitea_runner_operator.api.naming import runner_prefix
from tests.support.fake_cluster import (
    KEY,
    T0,
    FakeCluster,
    first_runner,
    make,
    runner_pod,
    snapshot,
    took_job,
)


def _evicted(pod: str, job: str) -> dict:
    evicted = runner_pod(job, pod, conditions=[
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    ])  # fmt: skip
    evicted["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:20Z"
    return evicted


async def test_a_busy_runner_evicted_and_gone_from_the_cache_is_recorded_once():
    cluster = FakeCluster()
    name = await first_runner(cluster)
    took_job(cluster, name)
    # the Pod was evicted and deleted before the reconcile ran: only its last state is left
    cluster.gone_pods.append(_evicted(f"{name}-abcde", name))

    again, sources, _ = make(cluster, snapshot(queued=0))
    writes = cluster.status_writes
    await again.reconcile(KEY)
    assert cluster.status_writes == writes + 1  # the record goes out with the pass's status
    ((key, value),) = cluster.losses.items()
    assert key == name
    record = json.loads(value)
    assert (record["pod"], record["cause"], record["state"]) == (
        f"{name}-abcde",
        "EvictionByEvictionAPI",
        "lost",
    )
    assert sources.source.woken == 1  # the poll task follows it up now, not in a minute

    before = cluster.losses
    restarted, _, _ = make(cluster, snapshot(queued=0))
    await restarted.reconcile(KEY)
    assert cluster.losses == before  # a restart finds the record and writes nothing


async def test_an_idle_runner_deleted_is_no_loss():
    cluster = FakeCluster()
    name = await first_runner(cluster)
    gone = _evicted(f"{name}-abcde", name)
    gone["status"]["conditions"] = []  # deleted (reaped), not evicted
    cluster.gone_pods.append(gone)
    again, _, _ = make(cluster, snapshot(queued=0))
    await again.reconcile(KEY)
    assert cluster.losses == {}


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
    name = await first_runner(cluster)
    took_job(cluster, name)
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


def _records(count: int, state: LossState, at: float, settled_at: float = 0.0) -> dict[str, str]:
    prefix = runner_prefix("ci", "u1")
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    out = {}
    for i in range(count):
        job = prefix + "".join(alphabet[(i // 27**k) % 27] for k in range(5))
        out[job] = LossRecord(f"{job}-bcdfg", "Deleted", at, state, "acme/widgets", i, i,
                              settled_at=settled_at).encode()  # fmt: skip
    return out


async def test_records_that_stay_open_or_settled_ones_do_not_stop_a_new_loss_being_recorded():
    """100 open records whose follow-up never ends (a 403 on the job's repository) used to
    stop loss recording for the group for good, and 100 settled ones for a day: stale open
    records expire, settled ones make room, and the status stays within the bound."""
    for filler in (
        _records(100, LossState.HELD, at=T0 - 7 * 3600),
        _records(100, LossState.RERUN, at=T0 - 60, settled_at=T0 - 30),
    ):
        cluster = FakeCluster()
        name = await first_runner(cluster)
        took_job(cluster, name)
        cluster.gone_pods.append(_evicted(f"{name}-abcde", name))
        cluster.status = {**(cluster.status or {}), "losses": dict(filler)}
        again, _, _ = make(cluster, snapshot(queued=0))
        await again.reconcile(KEY)
        assert name in cluster.losses
        assert json.loads(cluster.losses[name])["state"] == "lost"
        assert len(cluster.losses) <= 100


async def test_records_that_are_open_and_recent_are_kept_and_the_new_loss_waits():
    cluster = FakeCluster()
    name = await first_runner(cluster)
    took_job(cluster, name)
    cluster.gone_pods.append(_evicted(f"{name}-abcde", name))
    fresh = _records(100, LossState.HELD, at=T0 - 60)
    cluster.status = {**(cluster.status or {}), "losses": dict(fresh)}
    again, _, _ = make(cluster, snapshot(queued=0))
    await again.reconcile(KEY)
    assert cluster.losses == fresh  # still being followed up: none is dropped for the new one
