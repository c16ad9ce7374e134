"""--sharding: "why is my job waiting" knows the groups its peers serve (issue 46). Each
replica used to evaluate the unmatched jobs of a Gitea against the groups it serves only,
and warned of jobs a peer's group runs. The evaluation now also takes every other group's
offer (scope and labels) from the layout every replica keeps."""

from __future__ import annotations

from kubernetes_asyncio import client

from gitea_runner_operator.api.credentials import normalise_url
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.reconcile.capacity.accounting import Answer, Claimant
from gitea_runner_operator.runtime.controller import Controller
from gitea_runner_operator.settings import Settings
from gitea_runner_operator.sharding.leases.membership import MembershipLeases
from tests.support.builders import VALID, spec_with
from tests.support.claims import job
from tests.support.leases import Clock, FakeLeases, without_runner_objects

URL = normalise_url(VALID["gitea"]["url"])


def group(namespace: str, labels: list[str]) -> dict:
    spec = spec_with(org="acme", repo="app", labels=labels)
    return {"metadata": {"namespace": namespace, "name": "ci"}, "spec": spec}


async def test_a_job_a_peers_group_runs_is_not_unmatched_here():
    async with client.ApiClient() as api:
        membership = MembershipLeases(api, "ops", "gro", "a", clock=Clock(), leases=FakeLeases())
        controller = Controller(api, Settings(sharding=True), membership=membership)
        without_runner_objects(controller.cache)
        cache = controller.cache.groups[0].cache
        cache["team-a/ci"] = group("team-a", ["linux"])  # served here
        cache["team-b/ci"] = group("team-b", ["gpu"])  # no label in common: served by a peer
        here = Claimant("team-a/ci", Scope.REPO, "acme", "app", frozenset({"linux"}), 0, 1)
        queued = [job(1, "acme/app", ("gpu",)), job(2, "acme/app", ("typo",))]
        book = controller.reconciler._unmatched
        before = controller.ledger.members.get(here.key)
        controller.ledger.report(URL, here, Answer(here.key, 1.0, tuple(queued)))
        book.changed(before, controller.ledger.members.get(here.key))
        verdict = book.evaluate(URL)
        assert verdict is not None
        assert [s.labels for s in verdict.sets] == [("typo",)]  # the gpu job is team-b's
        controller.queue.shut_down()
