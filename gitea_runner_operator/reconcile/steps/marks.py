"""The marks step: annotations the runner Jobs and Pods carry for others to read."""

from __future__ import annotations

from gitea_runner_operator.api import constants
from gitea_runner_operator.api.pod_template import SCALE_DOWN_ANNOTATIONS
from gitea_runner_operator.kit.together import all_of
from gitea_runner_operator.reconcile.inputs import GroupPass
from gitea_runner_operator.reconcile.ports import ClusterWrites
from gitea_runner_operator.reconcile.scaling import Plan, RunnerState

# Annotation writes (took-job, scale-down guards) one pass makes at most, and how soon the next
# pass comes for the rest: a pass stays short, so a finished runner is replaced at once.
MARKS_PER_PASS = 20
MARKS_REQUEUE = 0.05


async def mark(
    cluster: ClusterWrites, p: GroupPass, decision: Plan, *, every: bool = False
) -> bool:
    """A runner that took a job never covers demand again (its Job says so, for the next
    pass and the next process). A node autoscaler must not evict a running CI job; idle and
    starting runners never get that guard, so they never hold a node.

    At most ``MARKS_PER_PASS`` writes, concurrently: when a wave of runners turns busy at once,
    one pass writing them all one after the other took 10 s and more, and a runner finishing
    meanwhile waited that long for its replacement (issue 27). True when some are left for the
    next pass, which should then come at once (``MARKS_REQUEUE``). ``every``: all of them,
    ``MARKS_PER_PASS`` at a time (the group's writer, which holds no pass)."""
    writes = [
        (cluster.annotate_job if on_job else cluster.annotate_pod, name, body)
        for on_job, name, body in wanted(p, decision)
    ]
    while writes:
        now, writes = writes[:MARKS_PER_PASS], writes[MARKS_PER_PASS:]
        await all_of(*(write(p.namespace, name, body) for write, name, body in now))
        if not every:
            break
    return bool(writes)


def wanted(p: GroupPass, decision: Plan) -> list[tuple[bool, str, dict[str, str]]]:
    """The marks the pass asks for: (on a Job rather than a Pod, its name, the annotations)."""
    took = {constants.TOOK_JOB_ANNOTATION: "true"}
    marks = [(True, name, took) for name in decision.mark_took_job]
    marks += [
        (False, pod, dict(SCALE_DOWN_ANNOTATIONS))
        for view in p.views
        if decision.states.get(view.name) is RunnerState.BUSY
        for pod in view.unguarded_pods
    ]
    return marks
