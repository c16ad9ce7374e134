"""The planning step: the pure plan of :mod:`.scaling` for one pass, bounded by the group's
share of its family's jobs (:mod:`.ledger`), plus the Forgejo reaps (:mod:`.forgejo`). Pure."""

from __future__ import annotations

import dataclasses

from gitea_runner_operator.reconcile import forgejo
from gitea_runner_operator.reconcile.capacity.ledger import Ledger
from gitea_runner_operator.reconcile.inputs import GroupPass
from gitea_runner_operator.reconcile.scaling import Plan, plan


def decide(p: GroupPass, ledger: Ledger, *, now: float, held_back: bool) -> Plan:
    """What to create and reap now. ``held_back``: the stuck back-off runs."""
    assert p.spec is not None and p.observation is not None
    spec = p.spec
    assigned = ledger.share(p.key)  # first: computing the share may make it current
    # A share computed before the latest change in its family (ledger.MIN_INTERVAL) may
    # still hold jobs that runners took since: weighed against this group's runners as
    # they are now it could create for a covered job. Create only on a current share;
    # the pass comes back once the family's assignment may be recomputed.
    stale = ledger.stale(p.key)
    decision = plan(
        group_name=p.name,
        group_uid=p.uid,
        jobs=list(p.views),
        observation=p.observation,
        offered=spec.label_names,
        max_active=spec.max_active_runners,
        idle_timeout=spec.idle_timeout_seconds,
        startup_timeout=spec.startup_timeout_seconds,
        now=now,
        pending_creations=p.pending,
        creation_blocked=held_back or stale,
        assigned=assigned,
        min_idle=spec.min_idle_runners,
        warm_max_age=spec.warm_runner_max_age_seconds,
        unsettled=p.released,
    )
    bound = forgejo.is_forgejo(p.snapshot)  # each runner takes the job it is bound to
    room = ledger.room(p.key, races=not bound)
    if room is not None and decision.create > room + spec.min_idle_runners:
        # Whichever runner asks first takes a job: never more than can surely find one.
        decision = dataclasses.replace(decision, create=room + spec.min_idle_runners)
    if bound:
        decision = forgejo_reaps(p, decision)
    return decision


def forgejo_reaps(p: GroupPass, decision: Plan) -> Plan:
    """Add the runners bound to a Forgejo job that is gone (reconcile/forgejo.py)."""
    assert p.spec is not None and p.observation is not None
    by_name = {r.name: r.id for r in p.observation.runners}
    ids = {v.name: tuple(by_name[n] for n in (*v.pod_names, v.name) if n in by_name)
           for v in p.views}  # fmt: skip
    proposed = {c.job_name for c in decision.reap}
    surplus = forgejo.surplus_suspended(
        p.views,
        decision.states,
        demand=decision.demand,
        not_busy=decision.not_busy,
        min_idle=p.spec.min_idle_runners,
    )
    stale = [
        c
        for c in surplus
        + forgejo.stale_bindings(
            p.views,
            forgejo.job_handles(p.jobs),
            decision.states,
            p.observation,
            ids,
        )
        if c.job_name not in proposed
    ]
    return dataclasses.replace(decision, reap=(*decision.reap, *stale)) if stale else decision
