"""The marks step: annotations the runner Jobs and Pods carry for others to read."""

from __future__ import annotations

from gitea_runner_operator.api import constants
from gitea_runner_operator.api.pod_template import SCALE_DOWN_ANNOTATIONS
from gitea_runner_operator.reconcile.inputs import GroupPass
from gitea_runner_operator.reconcile.ports import ClusterWrites
from gitea_runner_operator.reconcile.scaling import Plan, RunnerState


async def mark(cluster: ClusterWrites, p: GroupPass, decision: Plan) -> None:
    """A runner that took a job never covers demand again (its Job says so, for the next
    pass and the next process). A node autoscaler must not evict a running CI job; idle and
    starting runners never get that guard, so they never hold a node."""
    for job_name in decision.mark_took_job:
        await cluster.annotate_job(p.namespace, job_name, {constants.TOOK_JOB_ANNOTATION: "true"})
    for view in p.views:
        if decision.states.get(view.name) is RunnerState.BUSY:
            for pod in view.unguarded_pods:
                await cluster.annotate_pod(p.namespace, pod, dict(SCALE_DOWN_ANNOTATIONS))
