"""The fake Gitea of the scale benchmarks (fake_gitea.py) with hooks: the repository and
organisation hook endpoints the operator's managed hooks use (list, create, edit, delete;
the secret is kept and never shown, as Gitea does), and ``workflow_job`` deliveries to them,
signed with each hook's secret, when a job is queued. ``drop_every``: every n-th delivery of
a queued job is lost (never sent), to measure what a lost delivery costs.

A stand-in: deliveries are sent at once from a pool of threads, without Gitea's queue or
retries (Gitea does not retry a failed delivery either)."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler
from typing import Any

from gitea_runner_operator.webhook.signature import sign
from tests.support.fake_gitea import SimulatedGitea


class HookedGitea(SimulatedGitea):
    def __init__(self, *args: Any, drop_every: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hooks: dict[int, dict[str, Any]] = {}  # id -> hook, with "owner", "repo", "secret"
        self.drop_every = drop_every
        self.sent = 0
        self.queued_sent = 0  # the deliveries that may be lost: those of queued jobs
        self.dropped: set[int] = set()  # job ids whose delivery was lost
        self.failed = 0  # deliveries the operator did not accept
        self._deliveries = ThreadPoolExecutor(max_workers=8)
        self._count_lock = threading.Lock()

    def stop(self) -> None:
        self._deliveries.shutdown(wait=False, cancel_futures=True)
        super().stop()

    # -- deliveries -----------------------------------------------------------------------

    def queue(self, owner: str, repo: str, labels: tuple[str, ...], n: int = 1) -> list[int]:
        ids = super().queue(owner, repo, labels, n)
        for job_id in ids:
            self.deliver(owner, repo, labels, job_id, "queued")
        return ids

    def deliver(
        self, owner: str, repo: str, labels: tuple[str, ...], job_id: int, action: str
    ) -> None:
        """Deliver one ``workflow_job`` event to every hook of the repository and its owner,
        unless it is the n-th (``drop_every``)."""
        with self._count_lock:
            self.sent += 1
            if action == "queued":
                self.queued_sent += 1
            lost = action == "queued" and self.drop_every > 0
            lost = lost and self.queued_sent % self.drop_every == 0
        if lost:
            self.dropped.add(job_id)
            return
        body = json.dumps(
            {
                "action": action,
                "repository": {
                    "full_name": f"{owner}/{repo}",
                    "html_url": f"{self.url}/{owner}/{repo}",
                },
                "workflow_job": {"id": job_id, "labels": list(labels), "name": f"j{job_id}"},
                "sender": {"login": "bench"},
            }
        ).encode()
        with self.lock:
            targets = [
                (h["config"]["url"], h["secret"])
                for h in self.hooks.values()
                if h["owner"] == owner and h["repo"] in (None, repo) and h["active"]
            ]
        for url, secret in targets:
            self._deliveries.submit(self._post, url, secret, body)

    def _post(self, url: str, secret: str, body: bytes) -> None:
        request = urllib.request.Request(
            url,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "X-Gitea-Event": "workflow_job",
                "X-Gitea-Delivery": str(uuid.uuid4()),
                "X-Gitea-Signature": sign(secret.encode(), body),
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                ok = answer.status == 202
        except Exception:
            ok = False
        if not ok:
            with self._count_lock:
                self.failed += 1

    # -- the hooks API --------------------------------------------------------------------

    def route(self, method: str, raw: str, body: Any = None) -> tuple[int, Any]:
        path = [p for p in raw.split("?", 1)[0].split("/") if p][2:]  # after /api/v1
        if path[:1] == ["orgs"] and path[2:3] == ["hooks"]:
            return self._hooks(method, path[1], None, path[3:], body)
        if path[:1] == ["repos"] and path[3:4] == ["hooks"]:
            return self._hooks(method, path[1], path[2], path[4:], body)
        return super().route(method, raw, body)

    def _hooks(
        self, method: str, owner: str, repo: str | None, rest: list[str], body: Any
    ) -> tuple[int, Any]:
        with self.lock:
            self.requests += 1
            mine = {i: h for i, h in self.hooks.items() if (h["owner"], h["repo"]) == (owner, repo)}
            if not rest:
                if method == "POST":
                    self._ids += 1
                    config = dict(body.get("config") or {})
                    secret = config.pop("secret", "")
                    hook = {
                        "id": self._ids,
                        "type": "gitea",
                        "owner": owner,
                        "repo": repo,
                        "secret": secret,
                        "active": bool(body.get("active", True)),
                        "events": list(body.get("events") or []),
                        "branch_filter": body.get("branch_filter", "*"),
                        "config": config,
                    }
                    self.hooks[self._ids] = hook
                    return 201, _shown(hook)
                return 200, [_shown(h) for h in mine.values()]
            hook = mine.get(int(rest[0]))
            if hook is None:
                return 404, {"message": "not found"}
            if method == "DELETE":
                del self.hooks[hook["id"]]
                return 204, {}
            if method == "PATCH":
                for key in ("active", "events", "branch_filter"):
                    if key in body:
                        hook[key] = body[key]
                config = dict(body.get("config") or {})
                config.pop("secret", None)  # Gitea's edit ignores a new secret
                hook["config"].update(config)
            return 200, _shown(hook)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        base = super()._handler()
        fake = self

        class Handler(base):  # type: ignore[valid-type,misc]
            def do_POST(self) -> None:  # noqa: N802 - http.server names it
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                self._answer(fake.route("POST", self.path, body))

        return Handler


def _shown(hook: dict[str, Any]) -> dict[str, Any]:
    """A hook as Gitea's API shows it: no secret, no bookkeeping of the fake."""
    return {k: v for k, v in hook.items() if k not in ("secret", "owner", "repo")}


def until(predicate: Callable[[], bool], timeout: float, step: float = 0.25) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return predicate()
