"""helm uninstall leaving the groups (api/detach.py): a marked group is drained as a deleted
one is, released, and then left alone, its spec untouched; once the mark is gone or has run
out, the operator serves it again, and a later deletion is a teardown of its own."""

from __future__ import annotations

from gitea_runner_operator.api.detach import detaching, marks
from gitea_runner_operator.api.gitea import ActionRunner
from gitea_runner_operator.reconcile.reconciler import FINALIZER
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


async def test_a_detached_group_drains_its_busy_runner_then_lets_go_and_creates_nothing():
    cluster = FakeCluster()
    name = await first_runner(cluster)
    pod = f"{name}-bcdfg"
    cluster.pods = [runner_pod(name, pod)]
    took_job(cluster, name)
    cluster.annotations = marks(T0 + 60, T0 + 900)
    busy = snapshot(
        runners=(ActionRunner(id=5, name=pod, busy=True, ephemeral=True),),
        queued=2,  # demand goes on: a detached group must not answer it
        started_at=200.0,
    )
    draining, sources, cache = make(cluster, busy, wall=T0 + 90)  # 30 s into a 5 min drain
    spec_before = dict(cache.spec)
    await draining.reconcile(KEY)
    assert cluster.all_created == 1 and cluster.deleted == []
    assert FINALIZER in cluster.finalizers
    assert sources.source.orders and sources.source.orders[-1].deleting
    after, _, _ = make(cluster, busy, wall=T0 + 60 + 301)  # the drain timeout passed
    await after.reconcile(KEY)
    assert cluster.deleted == [name]
    cluster.pods = []
    done, sources, cache = make(cluster, snapshot(queued=2, started_at=200.0), wall=T0 + 400)
    result = await done.reconcile(KEY)
    assert FINALIZER not in cluster.finalizers
    # looked at again when the mark runs out, not before
    assert result.requeue_after is not None and 500 <= result.requeue_after <= 502
    again = await done.reconcile(KEY)
    assert FINALIZER not in cluster.finalizers and sources.stopped  # no poll task left
    assert cluster.all_created == 0  # the drained runner went; none came for the queue
    assert again.requeue_after is not None
    assert cache.spec == spec_before


async def test_a_group_whose_mark_is_gone_is_served_again_and_its_deletion_tears_down():
    cluster = FakeCluster()
    cluster.annotations = marks(T0, T0 + 100)
    empty = snapshot(started_at=200.0)
    reconciler, _, _ = make(cluster, empty, wall=T0 + 30)
    await reconciler.reconcile(KEY)
    assert FINALIZER not in cluster.finalizers  # nothing to drain: let go at once
    # the next install removed the mark (or it ran out): the same process takes it back
    cluster.annotations = {}
    await reconciler.reconcile(KEY)
    assert FINALIZER in cluster.finalizers
    cluster.deletion = "2026-01-01T00:01:00Z"
    await reconciler.reconcile(KEY)
    assert FINALIZER not in cluster.finalizers  # released again, not skipped as done


def test_a_mark_counts_only_while_it_can_be_read_and_has_not_run_out():
    meta = {"annotations": marks(T0, T0 + 60)}
    assert detaching(meta, T0 + 59) is not None
    assert detaching(meta, T0 + 60) is None
    broken = {"annotations": {**marks(T0, T0 + 60), "gitea.bpg.pw/detach-until": "soon"}}
    assert detaching(broken, T0) is None
    assert detaching({}, T0) is None
