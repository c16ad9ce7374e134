"""Small Gitea REST helpers over urllib for tests (stdlib only).

Why: tests must set up orgs, repos and workflows and observe Actions jobs and
runners on a real Gitea without depending on the operator's own Gitea client
(which is what is under test).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any, Literal

from tests.testbed.jsonhttp import ApiError, request_json, wait_for

Scope = Literal["admin", "org", "repo", "user"]


class GiteaError(ApiError):
    """Gitea answered with an HTTP error."""


class GiteaAPI:
    """A token-authenticated client for ``<url>/api/v1``."""

    def __init__(
        self, url: str, token: str | None = None, basic: tuple[str, str] | None = None
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.basic = basic

    # ---------------------------------------------------------------- plumbing
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, Any] | None = None,
        timeout: float = 30.0,
    ) -> Any:
        """One JSON request to /api/v1<path>; returns the decoded body or None."""
        authorization = None
        if self.token:
            authorization = f"token {self.token}"
        elif self.basic:
            cred = base64.b64encode(f"{self.basic[0]}:{self.basic[1]}".encode()).decode()
            authorization = f"Basic {cred}"
        return request_json(
            method,
            f"{self.url}/api/v1",
            path,
            error=GiteaError,
            body=body,
            query=query,
            authorization=authorization,
            timeout=timeout,
        )

    def get(self, path: str, **query: Any) -> Any:
        """GET; keyword arguments become the query (lists repeat the key)."""
        return self.request("GET", path, query=query or None)

    def post(self, path: str, body: Any = None) -> dict[str, Any]:
        """POST a JSON body; Gitea answers with a JSON object."""
        out = self.request("POST", path, body if body is not None else {})
        return out if isinstance(out, dict) else {}

    def delete(self, path: str) -> Any:
        """DELETE."""
        return self.request("DELETE", path)

    # ---------------------------------------------------------------- setup
    def version(self) -> str:
        """Gitea's version string."""
        return str(self.get("/version")["version"])

    def create_user(
        self, username: str, password: str, email: str | None = None, admin: bool = False
    ) -> dict[str, Any]:
        """Create a user (needs a site-admin token)."""
        user = self.post(
            "/admin/users",
            {
                "username": username,
                "password": password,
                "email": email or f"{username}@example.invalid",
                "must_change_password": False,
                "send_notify": False,
            },
        )
        if admin:
            self.request(
                "PATCH",
                f"/admin/users/{username}",
                {"admin": True, "login_name": username, "source_id": 0},
            )
        return user

    def create_user_token(
        self, username: str, password: str, name: str = "gro-test", scopes: list[str] | None = None
    ) -> str:
        """An access token for a user, made with that user's basic auth."""
        c = GiteaAPI(self.url, basic=(username, password))
        out = c.post(f"/users/{username}/tokens", {"name": name, "scopes": scopes or ["all"]})
        return str(out["sha1"])

    def create_org(self, name: str, visibility: str = "public") -> dict[str, Any]:
        """Create an organisation owned by the token's user."""
        return self.post("/orgs", {"username": name, "visibility": visibility})

    def create_repo(
        self, owner: str | None, name: str, private: bool = False, auto_init: bool = True
    ) -> dict[str, Any]:
        """Create a repo in org ``owner`` (the token's user when None), with a first commit."""
        body = {
            "name": name,
            "private": private,
            "auto_init": auto_init,
            "default_branch": "main",
            "readme": "Default",
        }
        if owner is None:
            return self.post("/user/repos", body)
        try:
            return self.post(f"/orgs/{owner}/repos", body)
        except GiteaError as e:
            if e.status != 404:
                raise
            return self.post(f"/admin/users/{owner}/repos", body)  # a user, not an org

    def enable_actions(self, owner: str, repo: str) -> None:
        """Turn the repository's Actions unit on (default when [actions] is enabled)."""
        self.request("PATCH", f"/repos/{owner}/{repo}", {"has_actions": True})

    def put_file(
        self,
        owner: str,
        repo: str,
        path: str,
        content: str,
        message: str | None = None,
        branch: str = "main",
    ) -> dict[str, Any]:
        """Create or update a file through the contents API (a push: workflows trigger)."""
        body: dict[str, Any] = {
            "content": base64.b64encode(content.encode()).decode(),
            "message": message or f"add {path}",
            "branch": branch,
        }
        sha = self._file_sha(owner, repo, path, branch)
        if sha is None:
            return self.post(f"/repos/{owner}/{repo}/contents/{path}", body)
        body["sha"] = sha
        out: dict[str, Any] = self.request("PUT", f"/repos/{owner}/{repo}/contents/{path}", body)
        return out

    def commit_files(
        self,
        owner: str,
        repo: str,
        files: Mapping[str, str | None],
        message: str,
        branch: str = "main",
    ) -> str:
        """One commit that writes each file (text) or deletes it (None); returns its SHA.

        One commit, not one per file: a GitOps controller that polls between two commits
        would otherwise apply half a change."""
        ops: list[dict[str, Any]] = []
        for path, content in files.items():
            sha = self._file_sha(owner, repo, path, branch)
            if content is None:
                if sha is not None:
                    ops.append({"operation": "delete", "path": path, "sha": sha})
                continue
            op: dict[str, Any] = {
                "operation": "update" if sha else "create",
                "path": path,
                "content": base64.b64encode(content.encode()).decode(),
            }
            if sha:
                op["sha"] = sha
            ops.append(op)
        out = self.post(
            f"/repos/{owner}/{repo}/contents",
            {"branch": branch, "message": message, "files": ops},
        )
        return str(out["commit"]["sha"])

    def _file_sha(self, owner: str, repo: str, path: str, branch: str) -> str | None:
        try:
            existing = self.get(f"/repos/{owner}/{repo}/contents/{path}", ref=branch)
        except GiteaError as e:
            if e.status != 404:
                raise
            return None
        return str(existing["sha"])

    def push_workflow(self, owner: str, repo: str, name: str, yaml_text: str) -> dict[str, Any]:
        """Add ``.gitea/workflows/<name>.yml``; Gitea creates a run for the push event."""
        fname = name if name.endswith((".yml", ".yaml")) else f"{name}.yml"
        return self.put_file(owner, repo, f".gitea/workflows/{fname}", yaml_text)

    def create_webhook(
        self,
        url: str,
        owner: str | None = None,
        repo: str | None = None,
        secret: str = "",
        events: list[str] | None = None,
    ) -> dict[str, Any]:
        """Add a Gitea-type JSON webhook on an org (``repo`` None), a repo, or system-wide
        (``owner`` None; needs a site admin). Default events: ``workflow_job``."""
        body = {
            "type": "gitea",
            "active": True,
            "events": events or ["workflow_job"],
            "config": {"url": url, "content_type": "json", "secret": secret},
        }
        if owner is None:
            return self.post("/admin/hooks", {**body, "is_system_webhook": True})
        if repo is None:
            return self.post(f"/orgs/{owner}/hooks", body)
        return self.post(f"/repos/{owner}/{repo}/hooks", body)

    # ---------------------------------------------------------------- actions
    @staticmethod
    def _scope_prefix(scope: Scope, owner: str | None = None, repo: str | None = None) -> str:
        if scope == "admin":
            return "/admin"
        if scope == "org":
            return f"/orgs/{owner}"
        if scope == "repo":
            return f"/repos/{owner}/{repo}"
        return "/user"

    def registration_token(
        self, scope: Scope = "admin", owner: str | None = None, repo: str | None = None
    ) -> str:
        """A runner registration token for the scope (admin: global runners)."""
        if scope == "admin":
            try:
                return str(self.post("/admin/actions/runners/registration-token")["token"])
            except GiteaError as e:
                if e.status not in (404, 405):
                    raise
                return str(self.get("/admin/runners/registration-token")["token"])
        prefix = self._scope_prefix(scope, owner, repo)
        try:
            return str(self.post(f"{prefix}/actions/runners/registration-token")["token"])
        except GiteaError as e:
            if e.status not in (404, 405):
                raise
            return str(self.get(f"{prefix}/actions/runners/registration-token")["token"])

    def list_jobs(
        self,
        scope: Scope = "admin",
        owner: str | None = None,
        repo: str | None = None,
        status: str | list[str] | None = "queued",
        limit: int = 50,
    ) -> list[dict[str, Any]]:
        """All Actions jobs of a scope with the given status filter (pages through the list)."""
        prefix = self._scope_prefix(scope, owner, repo)
        jobs: list[dict[str, Any]] = []
        page = 1
        while True:
            q: dict[str, Any] = {"page": page, "limit": limit}
            if status:
                q["status"] = status
            out = self.get(f"{prefix}/actions/jobs", **q)
            batch = out.get("jobs") or []
            jobs += batch
            if len(batch) < limit or len(jobs) >= int(out.get("total_count", 0)):
                return jobs
            page += 1

    def list_runs(self, owner: str, repo: str, **query: Any) -> list[dict[str, Any]]:
        """Workflow runs of a repository."""
        out = self.get(f"/repos/{owner}/{repo}/actions/runs", **query)
        return list(out.get("workflow_runs") or [])

    def list_runners(
        self, scope: Scope = "admin", owner: str | None = None, repo: str | None = None
    ) -> list[dict[str, Any]]:
        """Registered runners of a scope (Gitea >= 1.24)."""
        prefix = self._scope_prefix(scope, owner, repo)
        out = self.get(f"{prefix}/actions/runners", limit=50)
        return list(out.get("runners") or []) if isinstance(out, dict) else list(out or [])

    def delete_runner(
        self,
        runner_id: int,
        scope: Scope = "admin",
        owner: str | None = None,
        repo: str | None = None,
    ) -> None:
        """Remove a runner registration."""
        self.delete(f"{self._scope_prefix(scope, owner, repo)}/actions/runners/{runner_id}")

    # ---------------------------------------------------------------- waiting
    @staticmethod
    def wait_for(
        predicate: Callable[[], Any],
        timeout: float = 60.0,
        interval: float = 0.5,
        what: str = "condition",
    ) -> Any:
        """Poll until ``predicate()`` is truthy; return its value or raise TimeoutError."""
        return wait_for(predicate, timeout=timeout, interval=interval, what=what)

    def wait_for_jobs(
        self,
        owner: str,
        repo: str,
        status: str | list[str] = "queued",
        count: int = 1,
        timeout: float = 60.0,
    ) -> list[dict[str, Any]]:
        """Wait until the repository lists at least ``count`` jobs with ``status``."""
        found: list[dict[str, Any]] = self.wait_for(
            lambda: (
                (j := self.list_jobs("repo", owner, repo, status=status)) and len(j) >= count and j
            ),
            timeout,
            what=f"{count} {status} job(s) in {owner}/{repo}",
        )
        return found

    def wait_for_job_status(
        self, owner: str, repo: str, job_id: int, status: str, timeout: float = 120.0
    ) -> dict[str, Any]:
        """Wait until one job reaches an API status (e.g. 'completed')."""

        def check() -> dict[str, Any] | None:
            for j in self.list_jobs("repo", owner, repo, status=None):
                if j["id"] == job_id and j["status"] == status:
                    return j
            return None

        job: dict[str, Any] = self.wait_for(check, timeout, what=f"job {job_id} -> {status}")
        return job
