"""The webhook server under test on a loopback port, with the groups and secrets it routes
by, and signed delivery bodies."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.sharding.forwards import Split
from gitea_runner_operator.webhook.routing import GroupDescriptor, SecretLocation
from gitea_runner_operator.webhook.server import PATH, Limits, WebhookServer
from gitea_runner_operator.webhook.signature import sign

URL = "https://git.example.com"
OPERATOR = b"operator-wide"
SECRETS = {
    SecretLocation("team-a", "hook", "secret"): b"team-a-secret",
    SecretLocation("team-b", "hook", "secret"): b"team-b-secret",
}
A = SecretLocation("team-a", "hook", "secret")
B = SecretLocation("team-b", "hook", "secret")


def group(key, scope, org=None, repo=None, secret=None, labels=("linux",)):
    return GroupDescriptor(key, URL, scope, org, repo, frozenset(labels), secret)


GROUPS = [
    group("team-a/widgets", Scope.REPO, "acme", "widgets", secret=A),
    group("team-a/widgets-gpu", Scope.REPO, "acme", "widgets", secret=A, labels=("linux", "gpu")),
    group("team-b/acme", Scope.ORG, "acme", secret=B),
    group("ops/everything", Scope.GLOBAL),
]


def body_for(full_name="acme/widgets", action="queued", labels=("linux",), marker="x", job_id=None):
    job = {"labels": list(labels), "name": marker}
    if job_id is not None:
        job["id"] = job_id
    return json.dumps(
        {
            "action": action,
            "repository": {"full_name": full_name, "html_url": f"{URL}/{full_name}"},
            "workflow_job": job,
            "sender": {"login": "someone"},
        }
    ).encode()


class FakeOperator:
    """The receiver's one port (webhook/ports.Operator) over plain values and callables:
    ``listed`` (the groups: a callable or a list), and by name ``on_wake`` and
    ``on_delivered`` (each told of every call), ``secret_provider``, and ``is_active``,
    ``known``, ``in_flight`` and ``splits`` as the operator would answer them."""

    ANSWERS = ("on_wake", "secret_provider", "on_delivered", "is_active", "known", "in_flight")

    def __init__(self, listed: Any = (), splits: Any = None, **answers: Any) -> None:
        self.listed, self.splits = listed, splits
        self.heard_for: list[tuple[str, int | None]] = []  # evidence told (heard)
        for name in self.ANSWERS:
            setattr(self, name, answers.pop(name, None))
        assert not answers, f"unknown answers: {sorted(answers)}"

    def active(self):
        return self.is_active is None or self.is_active()

    def groups(self):
        return self.listed() if callable(self.listed) else self.listed

    async def secret(self, where):
        return None if self.secret_provider is None else await self.secret_provider(where)

    def secret_at_hand(self, where):
        """What a provider with a cache (webhook/secrets.CachedSecretReader) has at hand;
        a plain provider has nothing, and every secret is asked for."""
        at_hand = getattr(self.secret_provider, "at_hand", None)
        return None if at_hand is None else at_hand(where)

    async def split(self, keys):
        return Split(tuple(keys)) if self.splits is None else self.splits(keys)

    def wake(self, key):
        if self.on_wake is not None:
            self.on_wake(key)

    def knows(self, key, job_id):
        return self.known is not None and self.known(key, job_id)

    def heard(self, key, job_id):
        self.heard_for.append((key, job_id))

    def asking(self, key):
        return self.in_flight is not None and self.in_flight(key)

    def delivered(self, outcome):
        if self.on_delivered is not None:
            self.on_delivered(outcome)


class Harness:
    def __init__(
        self,
        operator_secret=OPERATOR,
        groups=GROUPS,
        secrets=SECRETS,
        max_body=4096,
        active=None,
        wake_interval=0.0,
        known=None,
        split=None,
        forwarder=None,
        forward_key=None,
        **limits,
    ):
        self.woken = []
        self.outcomes = []
        self.lookups = []

        async def provider(where):
            self.lookups.append(where)
            return secrets.get(where)

        self.operator = FakeOperator(
            lambda: groups,
            on_wake=self.woken.append,
            secret_provider=provider,
            on_delivered=self.outcomes.append,
            is_active=active,
            known=known,
            splits=split,
        )
        self.server = WebhookServer(
            "127.0.0.1",
            0,
            self.operator,
            operator_secret=operator_secret,
            limits=Limits(max_body=max_body, wake_interval=wake_interval, **limits),
            forwarder=forwarder,
            forward_key=forward_key,
        )

    async def post(
        self, body, secret=None, event="workflow_job", signature=None, params_group=None, **headers
    ):
        hdrs = {"X-Gitea-Event": event, "Content-Type": "application/json", **headers}
        if signature is None and secret is not None:
            signature = sign(secret, body)
        if signature is not None:
            hdrs["X-Gitea-Signature"] = signature
        async with TestClient(TestServer(self.server.app())) as client:
            params = {"group": params_group} if params_group is not None else None
            resp = await client.post(PATH, data=body, headers=hdrs, params=params)
            return resp.status, await resp.text()


def post_delivery(port: int, body: bytes, signature: str, timeout: float = 30) -> str:
    """POST a delivery to a receiver on ``port`` as Gitea does, from a thread; the answer's
    status (or the error's name)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{PATH}",
        data=body,
        method="POST",
        headers={
            "X-Gitea-Event": "workflow_job",
            "X-Gitea-Delivery": str(uuid.uuid4()),
            "X-Gitea-Signature": signature,
            "Content-Type": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return str(resp.status)
    except urllib.error.HTTPError as exc:
        return str(exc.code)
    except Exception as exc:
        return type(exc).__name__
