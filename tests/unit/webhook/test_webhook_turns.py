"""A genuine delivery does not queue behind the rest of the loop's work more than it must.

Every tenant shares one event loop: each time a delivery's handler yields it (a task, a
gather), it waits until everything else ready has run once, other tenants' parsed answers
and forged deliveries included. Under the hostile benchmark's attacks (issue 45) that is
milliseconds per turn, so a delivery's latency is about its turns times the loop's busyness.
Its hook secret is read once a minute at most (webhook/secrets.CachedSecretReader); every
other time it is at hand, and the delivery is then received, verified and its groups woken
without handing the loop to anyone else."""

from __future__ import annotations

import asyncio
from unittest import mock

from aiohttp import streams
from aiohttp.test_utils import make_mocked_request

from gitea_runner_operator.webhook.secrets import CachedSecretReader
from gitea_runner_operator.webhook.server import PATH
from gitea_runner_operator.webhook.signature import sign
from tests.support.webhook import SECRETS, Harness, body_for


def delivery(body: bytes, secret: bytes, n: int):
    """A request as aiohttp hands it to the receiver, its body already arrived (Gitea sends
    headers and body at once), from Gitea's address."""
    headers = {
        "X-Gitea-Event": "workflow_job",
        "X-Gitea-Delivery": f"delivery-{n}",
        "X-Gitea-Signature": sign(secret, body),
        "Content-Type": "application/json",
        "Content-Length": str(len(body)),
    }
    payload = streams.StreamReader(mock.Mock(_reading_paused=False), 2**16, loop=mock.Mock())
    payload.feed_data(body)
    payload.feed_eof()
    transport = mock.Mock()
    transport.get_extra_info.return_value = ("127.0.0.1", 40000 + n)
    return make_mocked_request("POST", PATH, headers=headers, payload=payload, transport=transport)


async def test_a_delivery_whose_secret_was_read_lately_is_accepted_without_yielding_the_loop():
    async def read(where):
        return SECRETS[where]

    harness = Harness(operator_secret=None)
    harness.operator.secret_provider = CachedSecretReader(None, read=read)
    server = harness.server
    body = body_for("acme/widgets")
    secret = SECRETS[next(iter(SECRETS))]  # team-a's: its two repo groups

    first = await server._deliver(delivery(body, secret, 1))  # reads the secret: it may wait
    assert first.status == 202

    turns = 0
    stop = asyncio.Event()

    async def another_tenant() -> None:  # one step of other work per turn of the loop
        nonlocal turns
        while not stop.is_set():
            turns += 1
            await asyncio.sleep(0)

    neighbour = asyncio.create_task(another_tenant())
    await asyncio.sleep(0)
    answers = []
    for n in range(2, 6):
        before = turns
        answers.append(((await server._deliver(delivery(body, secret, n))).status, turns - before))
    stop.set()
    await neighbour

    # Accepted, each woke its groups, and none waited for a turn of the other work (before:
    # 3 turns each, a task per secret and a gather, all while holding a verification slot).
    assert answers == [(202, 0)] * 4
    assert harness.woken.count("team-a/widgets") == 5
