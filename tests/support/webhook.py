"""The webhook server under test on a loopback port, with the groups and secrets it routes
by, and signed delivery bodies."""

from __future__ import annotations

import json

from aiohttp.test_utils import TestClient, TestServer

from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.webhook.routing import GroupDescriptor, SecretLocation
from gitea_runner_operator.webhook.server import PATH, WebhookServer
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
        **more,
    ):
        self.woken = []
        self.outcomes = []
        self.lookups = []

        async def provider(where):
            self.lookups.append(where)
            return secrets.get(where)

        self.server = WebhookServer(
            "127.0.0.1",
            0,
            groups=lambda: groups,
            wake=self.woken.append,
            operator_secret=operator_secret,
            group_secret=provider,
            on_delivery=self.outcomes.append,
            max_body=max_body,
            active=active,
            wake_interval=wake_interval,
            known=known,
            **more,
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
