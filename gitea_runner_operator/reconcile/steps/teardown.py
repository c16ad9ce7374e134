"""The teardown step of a deleting group: ask its poll task to remove its runners (and its
hook) from Gitea, delete what Gitea no longer needs, and release the finalizer once done,
or, never wedging, once the drain timeout and a short grace have passed."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from gitea_runner_operator.api import constants
from gitea_runner_operator.api.credentials import CREDENTIALS_GONE
from gitea_runner_operator.api.observation import Observation
from gitea_runner_operator.api.runnergroup import InvalidSpec, RunnerGroupSpec, parse_spec
from gitea_runner_operator.kit.together import all_of
from gitea_runner_operator.objects.views import parse_time
from gitea_runner_operator.reconcile.inputs import GroupPass
from gitea_runner_operator.reconcile.leftovers import Leftovers, describe
from gitea_runner_operator.reconcile.ports import ClusterWrites, GroupSource, ReapOrder, Sources
from gitea_runner_operator.reconcile.scaling import group_registrations, teardown
from gitea_runner_operator.reconcile.state import GroupState

log = structlog.get_logger(__name__)

FINALIZER = f"{constants.GROUP}/teardown"
# A deleting group waits this long for a fresh answer from Gitea before giving up on it.
TEARDOWN_ANSWER_GRACE = 60.0
# After the drain timeout, the last removals (registrations of runners stopped at the drain
# timeout, the hook) get this long; then the finalizer goes whatever Gitea says.
TEARDOWN_FINAL_GRACE = 30.0


@dataclass(frozen=True, slots=True)
class Teardown:
    """The teardown step, with what it writes through and the poll tasks it asks."""

    cluster: ClusterWrites
    sources: Sources
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time

    async def run(
        self, p: GroupPass, state: GroupState, since: float | None = None
    ) -> float | None:
        """One teardown pass; returns when to look again (None: done or not ours).
        ``since``: the wall-clock start of a detach (``helm uninstall`` leaving the group in
        place, api/detach.py), which the drain counts from as it counts from a deletion."""
        meta, key = p.meta, p.key
        finalizers = list(meta.get("finalizers") or [])
        if FINALIZER not in finalizers:
            await self.sources.stop(key)
            return None  # held by someone else's finalizer: nothing of ours to do
        if state.released_uid == meta.get("uid"):
            return None  # released already; the watch will show it gone
        try:
            spec: RunnerGroupSpec | None = parse_spec(p.group.get("spec"))
        except InvalidSpec:
            spec = None
        deleted_at = parse_time(meta.get("deletionTimestamp")) or since or self.wall_clock()
        drain = spec.drain_timeout_seconds if spec is not None else 0.0
        drained = self.wall_clock() >= deleted_at + drain
        source = await self.sources.ensure(key, spec) if spec is not None else None
        if state.teardown_since is None:
            state.teardown_since = self.clock()
            if source is not None:
                source.wake()
        snapshot = source.latest if source is not None else None
        if snapshot is not None and snapshot.started_at < state.teardown_since:
            snapshot = None  # asked before the teardown began: may miss new registrations
        observation = snapshot.observation if snapshot is not None else None
        plan_ = teardown(
            group_name=p.name,
            group_uid=p.uid,
            jobs=list(p.views),
            observation=observation,
            drained=drained,
        )
        hooked = spec is not None and spec.manages_hook
        if source is not None:
            source.submit(
                ReapOrder(p.group, plan_.reap, plan_.orphans, remove_hook=hooked, deleting=True)
            )
            source.wake()
        # Deletes at once, not one answer after another (kit/together.py).
        doomed = list(plan_.force_delete)
        if not spec:
            # Nothing to ask Gitea with: clean the cluster side and let the object go.
            doomed += [view.name for view in p.views if view.alive]
        await all_of(*(self.cluster.delete_job(p.namespace, n) for n in dict.fromkeys(doomed)))
        # Never wedge: after the drain timeout (plus a short grace for the last removals)
        # the finalizer goes whatever Gitea says, refusal and silence alike; at once when
        # Gitea answered with a failure, or when no runner is left and the credentials are
        # gone (nothing could be removed anyway).
        failed = snapshot is not None and snapshot.problem is not None
        silent = self.clock() - state.teardown_since > TEARDOWN_ANSWER_GRACE
        alive = tuple(v.name for v in p.views if v.alive)
        creds_gone = (
            snapshot is not None
            and snapshot.problem is not None
            and snapshot.problem.reason in CREDENTIALS_GONE
            and not alive
        )
        final = self.wall_clock() >= deleted_at + drain + TEARDOWN_FINAL_GRACE
        unanswered = observation is None and (failed or silent)
        give_up = creds_gone or (drained and (final or unanswered))
        done = plan_.done and (not hooked or (source is not None and source.hook_removed))
        if done or spec is None or give_up:
            if not done and spec is not None:
                message = describe(
                    leftovers(p, source, observation, alive, hooked),
                    snapshot.problem.message
                    if snapshot is not None and snapshot.problem is not None
                    else "Gitea did not answer"
                    if observation is None
                    else "Gitea answered but refused or failed the removals (see the operator log)",
                    at_once=creds_gone and not drained,
                )
                log.warning("teardown incomplete", group=key, reason=message)
                await self.cluster.emit_event(p.group, "Warning", "TeardownIncomplete", message)
            finalizers.remove(FINALIZER)
            await self.cluster.set_finalizers(
                p.namespace, p.name, finalizers, str(meta.get("resourceVersion"))
            )
            state.released_uid = meta.get("uid")
            log.info("teardown complete, finalizer released", group=key, detached=since is not None)
            return None
        return 2.0 if drained else 5.0


def leftovers(
    p: GroupPass,
    source: GroupSource | None,
    observation: Observation | None,
    alive: tuple[str, ...],
    hooked: bool,
) -> Leftovers:
    """What a giving-up teardown leaves behind: by the freshest runner list there is
    (one from before the deletion still names every runner that existed then)."""
    if observation is None and source is not None and source.latest is not None:
        observation = source.latest.observation
    registrations = (
        tuple(group_registrations(p.name, p.uid, observation.runners))
        if observation is not None
        else None
    )
    return Leftovers(
        registrations=registrations,
        alive_jobs=alive,
        hook_left=hooked and not (source is not None and source.hook_removed),
        hook_id=source.kept_hook_id if source is not None else None,
    )
