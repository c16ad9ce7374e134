"""--sharding: forwards authenticated by the replicas themselves (issue 45). A tenant who
rotates its hook Secret makes Gitea's signature fail at the peer a forward goes to; the
peer used to charge that failure to the forwarding replica's address, and once its burst
was spent, every tenant's forwards from that replica whose secret is found by the
repository hint were answered 429 (2-3 of 20 woke their group). A forward tagged with the
replicas' shared key is never charged; an untagged one, or one with a wrong tag, is, as any
sender's."""

from __future__ import annotations

import asyncio
import itertools

from gitea_runner_operator.webhook.forwarding import Forwarder
from gitea_runner_operator.webhook.guard import PENALTY_BURST
from gitea_runner_operator.webhook.server import PATH
from gitea_runner_operator.webhook.signature import sign
from tests.support.webhook import SECRETS, B, Harness, body_for

KEY = b"the-replicas-shared-key"
_ids = itertools.count()


def send(forwarder: Forwarder, address: str, secret: bytes, marker: str) -> None:
    body = body_for(full_name="acme/other", marker=marker)  # only team-b's org group routes it
    headers = {
        "X-Gitea-Event": "workflow_job",
        "X-Gitea-Delivery": f"d-{next(_ids)}",
        "X-Gitea-Signature": sign(secret, body),
        "Content-Type": "application/json",
    }
    assert forwarder.send(address, PATH, body, headers)


async def settled(forwarder: Forwarder) -> None:
    await asyncio.gather(*forwarder._tasks, return_exceptions=True)


async def rotated_then_genuine(peer_key: bytes | None, sender_key: bytes | None) -> list[str]:
    """A tenant still signing with its old secret fails PENALTY_BURST forwards, and keeps
    failing; between its failures, 10 genuine forwards of another tenant (whose secret only
    the repository hint finds) go from the same replica."""
    # No system hook secret: only the repository hint finds a secret.
    peer = Harness(operator_secret=None, forward_key=peer_key, penalty_delay=0.05)
    await peer.server.start()
    forwarder = Forwarder("pod-a", key=sender_key)
    address = f"127.0.0.1:{peer.server.port}"
    stale = b"team-b-old-secret"
    try:
        for i in range(PENALTY_BURST):
            send(forwarder, address, stale, f"stale-{i}")
            await settled(forwarder)
        for i in range(10):
            for j in range(2):
                send(forwarder, address, stale, f"stale-{i}-{j}")
                await settled(forwarder)
            send(forwarder, address, SECRETS[B], f"genuine-{i}")
            await settled(forwarder)
    finally:
        await forwarder.close()
        await peer.server.stop()
    return [key for key in peer.woken if key == "team-b/acme"]


async def test_a_forward_tagged_by_a_replica_is_never_charged_for_a_tenants_failures():
    assert len(await rotated_then_genuine(KEY, KEY)) == 10


async def test_an_untagged_or_mistagged_forward_is_charged_as_any_sender():
    assert len(await rotated_then_genuine(KEY, None)) < 10
    assert len(await rotated_then_genuine(KEY, b"a-guess")) < 10
