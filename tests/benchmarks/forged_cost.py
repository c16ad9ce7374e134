"""Micro benchmark: the receiver's CPU per forged webhook delivery, by kind of forgery.

    python -m tests.benchmarks.forged_cost [--n 2000]

The operator's webhook receiver runs in this process, on a loopback port, with 20 groups that
have their own hook secrets (the hostile benchmark's healthy groups); a separate process
sends ``n`` deliveries of each kind one after the other over one kept-alive connection, from
127.0.0.2. What is printed is this process's CPU (``time.process_time``: the receiver's
event loop and its hashing thread, nothing of the client) divided by the deliveries, and the
answers' status codes. A figure, not an assertion: the unit tests count the work instead.

Kinds: the hostile benchmark's three forged bodies (``FORGED_BODIES``, built to make the
pre-signature parse costly); a plausible payload naming a covered repository with a wrong
signature (candidate secrets are tried); the same with a content type Gitea never sends; no
signature; and a genuine signed delivery for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import secrets
import subprocess
import sys
import time
import uuid

from gitea_runner_operator import logsetup
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.webhook.routing import GroupDescriptor, SecretLocation
from gitea_runner_operator.webhook.server import PATH, Limits, WebhookServer
from gitea_runner_operator.webhook.signature import sign
from tests.benchmarks.hostile_servers import FORGED_BODIES
from tests.support.webhook import FakeOperator

URL = "https://git.example.com"
GROUPS = 20
KINDS = ("forged-hostile", "forged-plausible", "forged-form", "unsigned", "genuine")


def _secret(i: int) -> bytes:
    return f"hook-secret-{i}".encode()


def _body(i: int) -> bytes:
    return json.dumps(
        {
            "action": "queued",
            "workflow_job": {"id": i, "labels": ["h0"], "name": "build", "steps": []},
            "repository": {"full_name": "team-0/repo", "html_url": f"{URL}/team-0/repo"},
            "sender": {"login": "someone"},
        }
    ).encode()


def _request(kind: str, i: int) -> tuple[bytes, dict[str, str]]:
    headers = {
        "X-Gitea-Event": "workflow_job",
        "X-Gitea-Delivery": str(uuid.uuid4()),
        "Content-Type": "application/json",
    }
    body = FORGED_BODIES[i % len(FORGED_BODIES)] if kind == "forged-hostile" else _body(i)
    if kind == "genuine":
        headers["X-Gitea-Signature"] = sign(_secret(0), body)
    elif kind != "unsigned":
        headers["X-Gitea-Signature"] = secrets.token_hex(32)
    if kind == "forged-form":
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    return body, headers


def client(port: int, kind: str, n: int) -> dict[str, int]:
    """Send ``n`` deliveries of ``kind``; the status codes counted."""
    statuses: dict[str, int] = {}
    conn = http.client.HTTPConnection("127.0.0.1", port, source_address=("127.0.0.2", 0))
    for i in range(n):
        body, headers = _request(kind, i)
        try:
            conn.request("POST", PATH, body=body, headers=headers)
            resp = conn.getresponse()
            resp.read()
            status = str(resp.status)
            if resp.will_close:
                conn.close()
        except (OSError, http.client.HTTPException) as exc:
            status = type(exc).__name__
            conn.close()
        statuses[status] = statuses.get(status, 0) + 1
    return statuses


def _groups() -> list[GroupDescriptor]:
    return [
        GroupDescriptor(
            f"team-{i % 4}/h{i}",
            URL,
            Scope.ORG,
            f"team-{i % 4}",
            None,
            frozenset({f"h{i}"}),
            SecretLocation(f"team-{i % 4}", f"hook-{i}", "secret"),
        )
        for i in range(GROUPS)
    ]


async def measure(n: int, kinds: list[str]) -> None:
    groups = _groups()
    by_location = {g.webhook_secret: _secret(i) for i, g in enumerate(groups)}

    async def provider(where: SecretLocation) -> bytes | None:
        return by_location.get(where)

    server = WebhookServer(
        "127.0.0.1",
        0,
        FakeOperator(groups, secret_provider=provider),
        # The CPU per delivery, not how late a penalised 429 comes (which throttles a forger
        # that waits for its answers: one at a time would take a second each here).
        limits=Limits(wake_interval=0.0, penalty_delay=0.0),
    )
    await server.start()
    try:
        print(f"{'kind':<18} {'CPU per delivery':>17}  answers")
        for kind in kinds:
            started = time.process_time()
            out = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", __spec__.name, "--client", str(server.port), kind, str(n)],
                capture_output=True,
                text=True,
                check=True,
            )
            spent = time.process_time() - started
            answers = json.loads(out.stdout)
            print(f"{kind:<18} {1e3 * spent / n:14.3f} ms  {answers}")
    finally:
        await server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--client", nargs=3, metavar=("PORT", "KIND", "N"))
    args = parser.parse_args(argv)
    if args.client:
        port, kind, n = args.client
        print(json.dumps(client(int(port), kind, int(n))))
        return 0
    logsetup.configure("json", "warning")  # as in production: no line per delivery
    asyncio.run(measure(args.n, args.kinds.split(",")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
