"""Why a runner Pod stopped, when it was not its runner's own doing.

An ephemeral runner ends by itself after its one job with exit code 0, whatever the job's
result (a failed step is the job's failure, not the runner's). Anything else that stops a
Pod whose runner holds a job takes the job down with it: Kubernetes says why in the Pod's
``DisruptionTarget`` condition (eviction through the Eviction API, taint-based deletion when
a node is unreachable, pre-emption, the kubelet's node-pressure eviction or graceful node
shutdown, the Pod garbage collector when the node object is gone), in ``status.reason``
(``Evicted``, ``NodeLost``, ``Shutdown``), or in the runner container's termination
(``OOMKilled``, or an exit code of 128 + a signal). Only the slimmed Pod (metadata and
status, kube/informer.py) is read, so nothing here needs the Pod's spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gitea_runner_operator.objects.views import runner_status

# Kubernetes' DisruptionTarget reasons (k8s.io/api/core/v1), all of them a loss to us.
DISRUPTION_REASONS = frozenset(
    {
        "EvictionByEvictionAPI",
        "DeletionByTaintManager",
        "PreemptionByScheduler",
        "TerminationByKubelet",
        "DeletionByPodGC",
    }
)
# status.reason values the kubelet or the node lifecycle controller set on a Pod it stopped.
STATUS_REASONS = frozenset({"Evicted", "NodeLost", "Shutdown", "Terminated", "NodeShutdown"})
# The user's own cap (spec.maxRunnerLifetime): the runner was stopped on purpose.
NOT_A_LOSS = frozenset({"DeadlineExceeded"})
# Cause recorded for a Pod deleted while busy with no other reason given (kubectl delete).
DELETED = "Deleted"


def _killed(terminated: Mapping[str, Any] | None) -> str | None:
    if not terminated:
        return None
    if terminated.get("reason") == "OOMKilled":
        return "OOMKilled"
    code = terminated.get("exitCode")
    if isinstance(code, int) and code >= 128:
        return f"Signal{code - 128}"
    return None


def loss_cause(pod: Mapping[str, Any]) -> str | None:
    """The reason this Pod's runner was stopped from outside, or None.

    ``Deleted`` means only that the Pod is being (or was) deleted before it finished: it
    counts as a loss only for a runner known to hold a job (the caller decides that), since
    the operator deletes idle runners itself."""
    status = pod.get("status") or {}
    if status.get("reason") in NOT_A_LOSS:
        return None
    for cond in status.get("conditions") or []:
        if (
            cond.get("type") == "DisruptionTarget"
            and cond.get("status") == "True"
            and cond.get("reason") in DISRUPTION_REASONS
        ):
            return str(cond["reason"])
    if status.get("reason") in STATUS_REASONS:
        return str(status["reason"])
    runner = runner_status(pod)
    for where in ("state", "lastState"):
        cause = _killed((runner.get(where) or {}).get("terminated"))
        if cause is not None:
            return cause
    if status.get("phase") == "Succeeded":
        return None
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return DELETED
    return None
