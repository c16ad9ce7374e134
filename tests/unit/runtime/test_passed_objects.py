"""Objects passed in are the ones used, even when empty: an empty Ledger or SecretStore is
falsy (``__len__``), and ``x or Default()`` would quietly replace it. Then the ledger's
``notify`` never fires and the process runs two Secret stores."""

from __future__ import annotations

from kubernetes_asyncio import client

from gitea_runner_operator.kube.secret_store import SecretStore
from gitea_runner_operator.reconcile.capacity.ledger import Ledger
from gitea_runner_operator.runtime.controller import Controller
from gitea_runner_operator.settings import Settings
from tests.support.builders import queued_job
from tests.support.family import World, answer, group_spec, reconciler


async def test_the_controller_uses_the_process_secret_store_even_when_empty():
    async with client.ApiClient() as api:
        store = SecretStore(api, ttl=60)
        assert len(store) == 0
        controller = Controller(api, Settings(), secret_store=store)
        assert controller.secrets.store is store


async def test_the_controllers_ledger_wakes_peers_through_its_queue():
    async with client.ApiClient() as api:
        controller = Controller(api, Settings())
        assert controller.reconciler._ledger._notify == controller.queue.add


async def test_a_passed_empty_ledger_is_the_one_that_notifies_peers():
    woken: list[str] = []
    ledger = Ledger(woken.append, min_interval=0.0)
    world = World()
    repo = world.add("team-b", "repo", group_spec("repo", "acme", "app"))
    org = world.add("team-a", "org", group_spec("org", "acme"))
    rec, sources, _ = reconciler(world, ledger=ledger)
    jobs = tuple(queued_job(i) for i in range(1, 4))
    # The repo group reports first, without an answer yet: it holds the family's jobs by
    # its room once the org group's answer lists them.
    await rec.reconcile(repo.key)
    sources.get(org.key).latest = answer(jobs)
    await rec.reconcile(org.key)
    assert ledger.share(repo.key) == list(jobs)
    assert repo.key in woken
