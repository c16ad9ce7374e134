"""A family never over-creates: over random interleavings of what Gitea, the cluster and the
operator do (jobs arriving, polls, reconciles, runners registering, taking jobs, finishing,
webhook wake-ups), no group creates a runner for a job another runner already covers.

Families: an org group with a repo group of that org, two org groups, and an org group whose
token reads only one repository beside a repo group. The real Reconciler and Ledger; Gitea and
the cluster are small in-memory models. "Covers" is exact: every runner a reconcile creates
must raise the size of a maximum matching of the not-busy runners (starting or idle) to the
queued jobs they can run. Jobs leave the queue only when a runner takes them. Some runners
take a job and finish it before any group polls again: with a restricted token, a job only
a peer's older answer lists (before issue 36: 8 of 150 schedules over-created)."""

from __future__ import annotations

import asyncio
import random

import pytest

from tests.support.family_sim import FAMILIES, Sim


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_family_never_creates_a_runner_for_a_covered_job(family):
    for seed in range(100):
        sim = Sim(FAMILIES[family], random.Random(seed))  # noqa: S311 - a fixed schedule
        try:
            asyncio.run(sim.run(120))
        except AssertionError as exc:
            raise AssertionError(f"{family}, seed {seed}: {exc}") from None


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_nor_when_its_runner_creates_are_sent_after_the_pass(family):
    """The same schedules with the creates sent by the group writers after the passes: the
    world moves between a pass's decision and its creates, and a pass may find its group's
    writes still under way."""
    for seed in range(100):
        sim = Sim(FAMILIES[family], random.Random(seed), later=True)  # noqa: S311
        try:
            asyncio.run(sim.run(120))
        except AssertionError as exc:
            raise AssertionError(f"{family}, seed {seed}: {exc}") from None
