"""When a group's reconcile is worth queueing: only when something it reads has changed.

A reconcile costs a few milliseconds; queued after every poll and every Pod status update,
1,000 quiet groups polling every 15 s cost 67 reconciles a second for nothing. The reconcile
stays level-triggered (it recomputes everything from what the cache and the latest answer
say), so skipping one whose inputs are unchanged loses no decision; a slow resync
(:data:`RESYNC`) still reconciles every group as a safety net (and, when nothing
changed, writes nothing: ``lastCheckTime`` goes out only with another change).

What the reconcile reads, and what queues it:
- the group's latest Gitea answer: queued when :func:`answer_key` differs from the last one
  handed over, when the answer was asked for (a webhook, the reconciler's own wake-up), or
  at the resync (poll/poller.py);
- its runner Jobs and Pods: queued on every event except one that changes only what no
  reconcile reads (:func:`owned_changed`);
- its spec (kube/cache.py ``spec_changed``), its family's shares (reconcile/capacity/ledger.py), and
  its timers (the reconcile's ``requeue_after``, reconcile/timers.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gitea_runner_operator.api.observation import Snapshot

# Every group is reconciled at least this often whatever changed (seconds): a lost event
# converges within it. It writes no status unless something besides lastCheckTime changed.
RESYNC = 60.0

# Metadata the API server changes on every write, read by no decision.
_VOLATILE_METADATA = frozenset({"resourceVersion", "managedFields"})
# Condition fields a kubelet may refresh without anything having changed.
_HEARTBEATS = frozenset({"lastProbeTime", "lastHeartbeatTime"})


def answer_key(snapshot: Snapshot) -> tuple[object, ...]:
    """What a decision reads of an answer, for equality: the problem, the queued jobs and
    runners as listed, and whether either list was cut short. Not when it was asked (an
    unchanged answer changes no decision), nor its ``retry_after`` (the poller's business).
    The once-a-minute sample of running and finished jobs (for the latency metrics) counts
    as a change, so the metrics get every sample."""
    obs = snapshot.observation
    if obs is None:
        return (snapshot.problem,)
    sample = snapshot.started_at if obs.in_progress or obs.finished else None
    return (
        snapshot.problem,
        obs.queued,
        obs.runners,
        obs.queued_complete,
        obs.runners_complete,
        obs.forge,
        sample,
    )


def new_queued(before: Snapshot | None, after: Snapshot | None) -> list[int]:
    """Ids of the queued jobs an answer lists that the one before did not (at most 20), for
    the wake-up path's log line: which observation first saw the job a delivery was about."""
    if after is None or after.observation is None:
        return []
    seen = set() if before is None or before.observation is None else before.observation.queued
    known = {job.id for job in seen}
    return [job.id for job in after.observation.queued if job.id not in known][:20]


def lists_queued(snapshot: Snapshot) -> bool:
    """Whether an answer lists a queued job, or cannot be weighed (no observation): its
    group's peers weigh even an unchanged one by its age then (Ledger.must_weigh)."""
    obs = snapshot.observation
    return obs is None or snapshot.problem is not None or bool(obs.queued)


def owned_changed(kind: str, obj: Mapping[str, Any], before: Mapping[str, Any] | None) -> bool:
    """Whether an event on a runner Job or Pod may change a decision: every creation and
    deletion, and an update that changes more than the resourceVersion and heartbeat times."""
    if kind != "MODIFIED" or before is None:
        return True
    return _relevant(obj) != _relevant(before)


def _relevant(obj: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(obj)
    meta = obj.get("metadata")
    if isinstance(meta, Mapping):
        out["metadata"] = {k: v for k, v in meta.items() if k not in _VOLATILE_METADATA}
    status = obj.get("status")
    if isinstance(status, Mapping) and isinstance(status.get("conditions"), list):
        out["status"] = {
            **status,
            "conditions": [
                {k: v for k, v in c.items() if k not in _HEARTBEATS}
                if isinstance(c, Mapping)
                else c
                for c in status["conditions"]
            ],
        }
    return out
