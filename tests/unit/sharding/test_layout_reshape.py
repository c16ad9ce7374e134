"""A layout no tenant can reshape, and that costs what changed (issue 46).

One ``scope: global`` group used to join its whole Gitea into one domain the moment it was
created, token working or not: among 1,000 groups, 654 moved between replicas. Now a global
group widens a domain only once it is admitted and its polls work (its status reads
Ready=True), the platform can keep ``scope: global`` to chosen namespaces, and a spec change
of one group parses that group's spec only."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

import gitea_runner_operator.reconcile.steps.admission as admission
import gitea_runner_operator.sharding.leases.round as round_module
from gitea_runner_operator.api.placement import Placement
from gitea_runner_operator.api.template_policy import TemplatePolicy
from gitea_runner_operator.reconcile.steps.admission import Admissions
from gitea_runner_operator.runtime.controller import Controller
from gitea_runner_operator.settings import Settings
from gitea_runner_operator.sharding.leases.membership import MembershipLeases
from gitea_runner_operator.sharding.leases.round import layout_of
from gitea_runner_operator.sharding.tenure import owner
from tests.support import fake_cluster as fake
from tests.support.builders import spec_with
from tests.support.gitops import World
from tests.support.leases import Clock, FakeLeases, without_runner_objects

MEMBERS = ("gro-a", "gro-b", "gro-c")
READY = {"conditions": [{"type": "Ready", "status": "True", "reason": "Polling"}]}


def group(key: str, spec: dict[str, Any], generation: int = 1, status: Any = None) -> dict:
    namespace, name = key.split("/")
    meta = {"namespace": namespace, "name": name, "uid": f"uid-{key}", "generation": generation}
    obj: dict[str, Any] = {"metadata": meta, "spec": spec}
    if status is not None:
        obj["status"] = status
    return obj


def thousand() -> dict[str, dict]:
    """1,000 repository groups of one Gitea, each its own family; ten of them share a GPU
    label."""
    out = {}
    for i in range(1000):
        labels = ["gpu"] if i < 10 else [f"linux-{i}"]
        out[f"team{i}/ci"] = group(f"team{i}/ci", spec_with(org=f"org{i}", labels=labels))
    return out


def owners(groups: dict[str, dict], admissions: Admissions | None = None) -> dict[str, str]:
    layout = (
        layout_of(groups.items()) if admissions is None else layout_of(groups.items(), admissions)
    )
    by_key = layout.domain_of()
    return {key: owner(by_key[key], MEMBERS) or "" for key in groups}


def moved(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {key for key in before.keys() & after.keys() if after[key] != before[key]}


GLOBAL = spec_with(scope="global", org=None, repo=None, labels=["gpu"])


def test_a_new_global_group_moves_only_the_groups_of_its_own_domain():
    groups = thousand()
    before = owners(groups)
    groups["platform/everyone"] = group("platform/everyone", GLOBAL)  # no status yet
    after = owners(groups)
    # Only the family its label makes (the ten GPU groups) may move; the other 990 stay.
    assert moved(before, after) <= {f"team{i}/ci" for i in range(10)}
    # Deleting it moves back only those.
    del groups["platform/everyone"]
    assert moved(after, owners(groups)) <= {f"team{i}/ci" for i in range(10)}


def test_a_global_group_whose_token_does_not_work_never_widens():
    groups = thousand()
    before = owners(groups)
    failing = {"conditions": [{"type": "Ready", "status": "False", "reason": "Unauthorized"}]}
    groups["platform/everyone"] = group("platform/everyone", GLOBAL, status=failing)
    assert len(moved(before, owners(groups))) <= 10


def test_a_global_group_whose_polls_work_joins_its_whole_gitea():
    groups = dict(list(thousand().items())[:20])
    groups["platform/everyone"] = group("platform/everyone", GLOBAL, status=READY)
    layout = layout_of(groups.items())
    assert len(set(layout.domain_of().values())) == 1


def test_global_scope_outside_the_chosen_namespaces_is_refused_and_widens_nothing():
    admissions = Admissions(TemplatePolicy(), None, frozenset({"platform"}))
    groups = dict(list(thousand().items())[:20])
    groups["team0/everyone"] = group("team0/everyone", GLOBAL, status=READY)  # a stale status
    layout = layout_of(groups.items(), admissions)
    domain_of = layout.domain_of()
    assert [k for k, d in domain_of.items() if d == domain_of["team0/everyone"]] == [
        "team0/everyone"
    ]
    verdict = admissions.admit("team0/everyone", groups["team0/everyone"]["metadata"], GLOBAL)
    assert verdict.refusal is not None
    assert verdict.refusal.reason == "GlobalScopeNotAllowed"
    assert "--global-scope-namespace" in verdict.refusal.message
    allowed = admissions.admit("platform/all", {"namespace": "platform", "uid": "u"}, GLOBAL)
    assert allowed.refusal is None


async def test_a_spec_change_of_one_group_parses_that_spec_only(monkeypatch):
    parsed: list[Any] = []
    for module in (admission, round_module):
        real = getattr(module, "parse_spec", None)
        if real is not None:

            def counting(raw: Any, real: Any = real) -> Any:
                parsed.append(raw)
                return real(raw)

            monkeypatch.setattr(module, "parse_spec", counting)
    groups = dict(list(thousand().items())[:50])
    async with client.ApiClient() as api:
        membership = MembershipLeases(api, "ops", "gro", "a", clock=Clock(), leases=FakeLeases())
        controller = Controller(api, Settings(sharding=True), membership=membership)
        without_runner_objects(controller.cache)
        assert controller.share is not None
        cache = controller.cache.groups[0].cache
        cache.update(groups)
        controller.share.layout()
        # For the groups it does not serve, a replica keeps their shape, not their spec.
        assert len(controller.admissions) == 0
        parsed.clear()
        before = groups["team7/ci"]
        after = group("team7/ci", spec_with(org="org7", labels=["gpu", "arm"]), generation=2)
        cache["team7/ci"] = after
        controller._on_group("team7/ci", "MODIFIED", after, before)
        controller.share.layout()
        assert len(parsed) == 1
        # A finalizer toggle (no new generation) parses nothing.
        parsed.clear()
        toggled = {**after, "metadata": {**after["metadata"], "finalizers": ["x"]}}
        cache["team7/ci"] = toggled
        controller._on_group("team7/ci", "MODIFIED", toggled, after)
        controller.share.layout()
        assert parsed == []
        controller.queue.shut_down()


def test_a_global_group_on_probation_is_a_domain_of_its_own_placed_on_probation():
    groups = dict(list(thousand().items())[:20])
    groups["platform/everyone"] = group("platform/everyone", GLOBAL)  # not Ready yet
    layout = layout_of(groups.items())
    domain = layout.domain_of()["platform/everyone"]
    assert layout.domains[domain] == frozenset({"platform/everyone"})
    placed = layout.placement(domain, layout.domains[domain], "gro-a")
    assert placed is not None and placed.probation
    team = layout.domain_of()["team0/ci"]
    placed = layout.placement(team, layout.domains[team], "gro-a")
    assert placed is not None and not placed.probation


async def test_a_group_on_probation_or_about_to_move_polls_but_creates_nothing():
    """Its replica may be the only one to count the jobs it sees only once every replica's
    layout has joined it to its Gitea's domain; until then another may count them too."""
    where: dict[str, Placement | None] = {fake.KEY: Placement("d-1", "gro-a", False, True)}
    world = World(fake.snapshot(queued=2))
    world.reconciler = fake.fresh_reconciler(
        world.cache, world.cluster, world.sources, world.clock, world.wall, placement=where.get
    )
    await world.pass_after(1)
    assert world.cluster.creates == 0
    where[fake.KEY] = None  # the layout moved its domain: released at the next round
    await world.pass_after(1)
    assert world.cluster.creates == 0
    where[fake.KEY] = Placement("d-2", "gro-a", True)  # joined, and held whole
    await world.pass_after(1)
    assert world.cluster.creates == 2
