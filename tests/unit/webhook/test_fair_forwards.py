"""--sharding: fair forwards (issue 46). One tenant's signed deliveries for groups a peer
serves used to leave as fast as they came: 3,200 forwards of another tenant were dropped
behind them (64 slots for everyone), and the victim's group woke for 5-9 of 25 deliveries.
Now a forward spends its groups' wake-up tokens before it leaves (a flood leaves as its
groups' wake-ups), the slots are shared by namespace, and a forward that fails wakes its
groups here."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from gitea_runner_operator.sharding.forwards import Split
from gitea_runner_operator.webhook.forwarding import Forwarder
from gitea_runner_operator.webhook.server import PATH
from gitea_runner_operator.webhook.wakes import WAKE_BURST
from tests.support.forwarding import raw_peer, settled, silent
from tests.support.webhook import SECRETS, A, B, Harness, body_for

HEADERS = {"X-Gitea-Event": "workflow_job", "Content-Type": "application/json"}


def everything_at(address: str) -> Callable[[Sequence[str]], Split]:
    return lambda keys: Split(peers={address: tuple(keys)})


async def test_a_tenants_flood_leaves_as_its_wake_ups_and_another_tenants_forward_goes():
    outcomes: list[str] = []
    forwarder = Forwarder("pod-a", timeout=30.0, on_outcome=outcomes.append)
    async with raw_peer(silent) as address:  # forwards stay under way
        here = Harness(split=everything_at(address), forwarder=forwarder, wake_interval=1.0)
        for i in range(100):  # team A's signed deliveries, for its managed hook
            body = body_for(marker=f"flood-{i}")
            await here.post(body, SECRETS[A], params_group="team-a/widgets")
        assert len(forwarder) <= WAKE_BURST  # not 64 under way, 36 dropped
        assert outcomes.count("paced") >= 100 - WAKE_BURST
        await here.post(body_for(full_name="acme/other"), SECRETS[B], params_group="team-b/acme")
        assert "dropped" not in outcomes
        assert len(forwarder) <= WAKE_BURST + 1
        await forwarder.close()


async def test_forward_slots_are_shared_by_namespace():
    forwarder = Forwarder("pod-a", timeout=30.0, in_flight=8)
    async with raw_peer(silent) as address:
        team_a = frozenset({"team-a"})
        flood = [
            forwarder.send(address, PATH, b"{}", HEADERS, namespaces=team_a) for _ in range(20)
        ]
        assert sum(flood) == 4  # half the slots while it is alone: room for a newcomer
        team_b = frozenset({"team-b"})
        assert forwarder.send(address, PATH, b"{}", HEADERS, namespaces=team_b)
        await forwarder.close()


async def test_a_failed_forward_wakes_its_groups_here():
    async with raw_peer(silent) as address:
        pass  # closed: nothing listens there any more
    forwarder = Forwarder("pod-a", timeout=2.0)
    here = Harness(split=everything_at(address), forwarder=forwarder)
    status, _ = await here.post(body_for(), SECRETS[A], params_group="team-a/widgets")
    assert status == 202
    await settled(forwarder)
    await asyncio.sleep(0)
    await forwarder.close()
    assert "team-a/widgets" in here.woken  # queued here: polled at once if this replica takes it
