"""A fake Forgejo 15.0.3 Actions API, following ``forgejo-15-actions-api.md`` to the letter.

A real Forgejo cannot be built here (its Go modules are refused by the module proxy), so the
operator's Forgejo path is tested against this contract instead, and docs/forgejo.md says so.
What it implements, by the reference's sections:

- §5 detection: ``GET /api/forgejo/v1/version`` (200) and ``GET /api/v1/version`` with the
  ``+gitea-1.22.0`` suffix; ``REQUIRE_SIGNIN_VIEW`` (403 without a token) is a switch;
- §1 the job listing at admin (and the deprecated ``/admin/runners/jobs``), org, repo and user
  scope: a bare array, ``null`` when empty [inf], unpaged, ``id DESC``; only waiting and
  running jobs; ``labels`` read from its first occurrence, trimmed as a whole, ``runs_on`` ⊆
  labels, present-but-empty selects empty ``runs_on``, an empty first item adds them too;
- §2 runners: list (bare array, ``X-Total-Count``, ``Link``, paging only with ``page`` [inf],
  ``limit`` capped at 50, ``visible`` by scope, ``last_online DESC``), get, delete (any
  status, a busy runner's job stays ``running`` [inf]), register (``POST``, 201
  ``{id, uuid, token}``, 422 without a name), the deprecated registration-token GET;
- permissions and token scopes (``read:``/``write:`` per category; site admin, org owner,
  repo owner, self) with Forgejo's error bodies;
- §3 the runner side over Connect's JSON encoding: ``Declare``, ``FetchTask``,
  ``FetchSingleTask`` (handle binding, ephemeral single use, concurrency-held jobs never
  picked), ``UpdateTask`` (a final result removes an ephemeral runner) and ``UpdateLog``;
- status rule: ``offline`` after 60 s without an RPC, ``active`` within 10 s of a task
  report, else ``idle``, on a clock tests can move (:meth:`FakeForgejo.advance`).

State changes happen under one lock, so a test thread may drive it while the server's own
loop thread answers the operator.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
import uuid as uuidlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

RPC = "/api/actions/runner.v1.RunnerService/"
PREFIXES = ("admin", "org", "repo", "user")
CATEGORY = {"admin": "admin", "org": "organization", "repo": "repository", "user": "user"}


@dataclass
class User:
    id: int
    login: str
    admin: bool = False


@dataclass
class Repo:
    id: int
    owner: str
    name: str
    actions: bool = True


@dataclass
class Token:
    user: str
    scopes: frozenset[str]  # e.g. {"write:admin", "read:organization"}; "all" = everything


@dataclass
class Job:
    id: int
    repo_id: int
    owner_id: int
    name: str
    runs_on: list[str] | None
    handle: str
    attempt: int = 1
    status: str = "waiting"  # waiting, running, blocked, success, failure, cancelled, skipped
    task_id: int = 0
    needs: list[str] | None = None
    held: bool = False  # waiting behind a concurrency group: listed, never picked
    updated: float = 0.0
    runner_id: int = 0


@dataclass
class Runner:
    id: int
    uuid: str
    token: str = field(repr=False)
    name: str
    owner_id: int = 0
    repo_id: int = 0
    description: str = ""
    ephemeral: bool = False
    labels: list[str] | None = None
    version: str = ""
    last_online: float = -1e12
    last_active: float = -1e12
    tasks: list[int] = field(default_factory=list)


class FakeForgejo:
    def __init__(self, version: str = "15.0.3+gitea-1.22.0") -> None:
        self.version = version
        self.require_signin_view = False
        self.lock = threading.RLock()
        self._offset = 0.0
        self.users: dict[str, User] = {}
        self.orgs: dict[str, int] = {}
        self.org_owners: dict[str, set[str]] = {}
        self.repos: dict[int, Repo] = {}
        self.tokens: dict[str, Token] = {}
        self.jobs: dict[int, Job] = {}
        self.runners: dict[int, Runner] = {}
        self.deleted_runners: list[tuple[int, str, str]] = []  # (id, name, status at deletion)
        self.registered: list[tuple[int, str]] = []  # (id, name) of every POST
        self.requests: list[tuple[str, str]] = []  # (method, path with query)
        self._ids = iter(range(1, 10**9))
        self.url = ""

    # -- test-side setup and runner simulation --------------------------------------------

    def now(self) -> float:
        return time.monotonic() + self._offset

    def advance(self, seconds: float) -> None:
        with self.lock:
            self._offset += seconds

    def _next(self) -> int:
        return next(self._ids)

    def add_user(self, login: str, *, admin: bool = False, scopes: str = "all") -> str:
        """A user and an access token of theirs (returned)."""
        with self.lock:
            self.users[login] = User(self._next(), login, admin)
            return self.add_token(login, scopes)

    def add_token(self, login: str, scopes: str = "all") -> str:
        token = secrets.token_hex(20)
        with self.lock:
            self.tokens[token] = Token(login, frozenset(s.strip() for s in scopes.split(",")))
        return token

    def add_org(self, name: str, owners: tuple[str, ...] = ()) -> None:
        with self.lock:
            self.orgs[name] = self._next()
            self.org_owners[name] = set(owners)

    def add_repo(self, owner: str, name: str, *, actions: bool = True) -> int:
        with self.lock:
            repo = Repo(self._next(), owner, name, actions)
            self.repos[repo.id] = repo
            return repo.id

    def add_job(
        self,
        owner: str,
        repo: str,
        runs_on: list[str] | None,
        *,
        name: str = "build",
        status: str = "waiting",
        held: bool = False,
        handle: str | None = None,
    ) -> Job:
        with self.lock:
            r = self._repo(owner, repo)
            assert r is not None, f"no repository {owner}/{repo}"
            job = Job(
                self._next(),
                r.id,
                self._owner_id(owner),
                name,
                runs_on,
                str(uuidlib.uuid4()) if handle is None else handle,
                status=status,
                held=held,
                updated=self.now(),
            )
            self.jobs[job.id] = job
            return job

    def cancel(self, job_id: int) -> None:
        """A user cancels the run: StopTask makes it final and removes its ephemeral runner."""
        with self.lock:
            job = self.jobs[job_id]
            job.status = "cancelled"
            runner = self.runners.get(job.runner_id)
            if runner is not None and runner.ephemeral:
                del self.runners[runner.id]

    def rerun(self, job_id: int) -> Job:
        """A re-run: same id, next attempt, a new handle, waiting again."""
        with self.lock:
            job = self.jobs[job_id]
            job.attempt += 1
            job.handle = str(uuidlib.uuid4())
            job.status, job.task_id, job.runner_id = "waiting", 0, 0
            job.updated = self.now()
            return job

    def waiting(self) -> list[Job]:
        with self.lock:
            return [j for j in self.jobs.values() if j.status == "waiting"]

    def runner_status(self, runner: Runner) -> str:
        now = self.now()
        if now - runner.last_online > 60:
            return "offline"
        if now - runner.last_active <= 10:
            return "active"
        return "idle"

    # -- scope resolution ----------------------------------------------------------------

    def _owner_id(self, owner: str) -> int:
        if owner in self.orgs:
            return self.orgs[owner]
        return self.users[owner].id

    def _repo(self, owner: str, name: str) -> Repo | None:
        return next(
            (r for r in self.repos.values() if r.owner.lower() == owner.lower() and r.name == name),
            None,
        )

    def _auth(self, request: web.Request) -> tuple[Token | None, web.Response | None]:
        header = request.headers.get("Authorization", "")
        if not header:
            return None, None
        value = header.removeprefix("token ").removeprefix("Bearer ").strip()
        token = self.tokens.get(value)
        if token is None:
            return None, _error(401, "user does not exist")
        return token, None

    def _scope_check(self, token: Token, category: str, write: bool) -> web.Response | None:
        if "all" in token.scopes:
            return None
        wanted = {f"write:{category}"} | (set() if write else {f"read:{category}"})
        if token.scopes & wanted:
            return None
        need = f"write:{category}" if write else f"read:{category}"
        return _error(403, f"token does not have at least one of required scope(s): [{need}]")

    def _target(
        self, request: web.Request, kind: str, write: bool
    ) -> tuple[dict[str, Any] | None, web.Response | None]:
        """Who may act on this scope (§1.1, §2.1): (scope filter, None) or (None, error)."""
        token, error = self._auth(request)
        if error is not None:
            return None, error
        if token is None:
            return None, _error(401, "token is required")
        if (refused := self._scope_check(token, CATEGORY[kind], write)) is not None:
            return None, refused
        user = self.users[token.user]
        info = request.match_info
        if kind == "admin":
            if not user.admin:
                return None, _error(403, "reqSiteAdmin")
            return {"kind": "admin"}, None
        if kind == "user":
            return {"kind": "user", "owner_id": user.id}, None
        if kind == "org":
            org = info["org"]
            if org not in self.orgs:
                return None, _not_found()
            if not (user.admin or user.login in self.org_owners[org]):
                return None, _error(403, "must be an organization owner")
            return {"kind": "org", "owner_id": self.orgs[org]}, None
        repo = self._repo(info["owner"], info["repo"])
        if repo is None or not repo.actions:
            return None, _not_found()
        owner_is_user = repo.owner == user.login
        org_owner = user.login in self.org_owners.get(repo.owner, set())
        if not (user.admin or owner_is_user or org_owner):
            return None, _error(403, "must be the repository owner")
        return {"kind": "repo", "repo_id": repo.id, "owner_id": self._owner_id(repo.owner)}, None

    # -- REST handlers ---------------------------------------------------------------------

    async def forgejo_version(self, request: web.Request) -> web.Response:
        token, error = self._auth(request)
        if error is not None:
            return error
        if self.require_signin_view and token is None:
            return _error(403, "Only signed in user is allowed to call APIs.")
        return web.json_response({"version": self.version})

    async def gitea_version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": self.version})

    async def get_user(self, request: web.Request) -> web.Response:
        token, error = self._auth(request)
        if error is not None or token is None:
            return error or _error(401, "token is required")
        user = self.users[token.user]
        return web.json_response({"id": user.id, "login": user.login, "is_admin": user.admin})

    async def get_org(self, request: web.Request) -> web.Response:
        org = request.match_info["org"]
        if org not in self.orgs:
            return _not_found()
        return web.json_response({"id": self.orgs[org], "username": org, "name": org})

    async def get_repo(self, request: web.Request) -> web.Response:
        repo = self._repo(request.match_info["owner"], request.match_info["repo"])
        return _not_found() if repo is None else web.json_response(_repo_json(repo))

    async def get_repo_by_id(self, request: web.Request) -> web.Response:
        repo = self.repos.get(int(request.match_info["id"]))
        return _not_found() if repo is None else web.json_response(_repo_json(repo))

    def _in_scope_job(self, scope: dict[str, Any], job: Job) -> bool:
        if scope["kind"] == "admin":
            return True
        if scope["kind"] == "repo":
            return job.repo_id == scope["repo_id"]
        return job.owner_id == scope["owner_id"]

    async def list_jobs(self, request: web.Request, kind: str) -> web.Response:
        scope, error = self._target(request, kind, write=False)
        if error is not None:
            return error
        assert scope is not None
        raw = request.query.getone("labels", None)  # only the first occurrence is read
        with self.lock:
            jobs = [
                j
                for j in self.jobs.values()
                if j.status in ("waiting", "running") and self._in_scope_job(scope, j)
            ]
            if raw is not None:
                wanted = raw.strip().split(",")  # items are not trimmed
                jobs = [j for j in jobs if _runs_on(j, wanted)]
            jobs.sort(key=lambda j: -j.id)
            body: list[dict[str, Any]] | None = [_job_json(j) for j in jobs] or None
        # The handler starts from a nil slice: nothing matching encodes as ``null``.
        return web.Response(text=json.dumps(body), content_type="application/json")

    def _visible_runner(self, scope: dict[str, Any], runner: Runner, *, visible: bool) -> bool:
        is_global = runner.owner_id == 0 and runner.repo_id == 0
        kind = scope["kind"]
        if kind == "admin":
            return visible or is_global
        if kind in ("org", "user"):
            return runner.owner_id == scope["owner_id"] or (visible and is_global)
        own = runner.repo_id == scope["repo_id"]
        return own or (visible and (runner.owner_id == scope["owner_id"] or is_global))

    def _editable(self, scope: dict[str, Any], runner: Runner) -> bool:
        kind = scope["kind"]
        if kind == "admin":
            return True
        if kind in ("org", "user"):
            return runner.owner_id == scope["owner_id"] and runner.repo_id == 0
        return runner.repo_id == scope["repo_id"]

    async def list_runners(self, request: web.Request, kind: str) -> web.Response:
        scope, error = self._target(request, kind, write=False)
        if error is not None:
            return error
        assert scope is not None
        visible = request.query.get("visible", "").lower() in ("1", "t", "true", "on", "yes")
        with self.lock:
            found = [
                r for r in self.runners.values() if self._visible_runner(scope, r, visible=visible)
            ]
            found.sort(key=lambda r: -r.last_online)
            total = len(found)
            headers = {"X-Total-Count": str(total)}
            page_raw = request.query.get("page")
            if page_raw is not None and page_raw.isdigit() and int(page_raw) >= 1:
                page = int(page_raw)
                limit = min(int(request.query.get("limit") or 30), 50)
                found = found[(page - 1) * limit : page * limit]
                if page * limit < total:
                    last = (total + limit - 1) // limit
                    headers["Link"] = (
                        f'<{request.path}?page={page + 1}&limit={limit}>; rel="next",'
                        f'<{request.path}?page={last}&limit={limit}>; rel="last"'
                    )
            body = [self._runner_json(r) for r in found]
        return web.json_response(body, headers=headers)

    async def get_runner(self, request: web.Request, kind: str) -> web.Response:
        scope, error = self._target(request, kind, write=False)
        if error is not None:
            return error
        assert scope is not None
        with self.lock:
            runner = self.runners.get(_int(request.match_info["id"]))
            if runner is None or not self._visible_runner(scope, runner, visible=True):
                return _not_found()
            return web.json_response(self._runner_json(runner))

    async def delete_runner(self, request: web.Request, kind: str) -> web.Response:
        """No status check: a busy runner goes too, and its job stays ``running`` until
        the zombie-task cron (not simulated) stops it."""
        scope, error = self._target(request, kind, write=True)
        if error is not None:
            return error
        assert scope is not None
        with self.lock:
            runner = self.runners.get(_int(request.match_info["id"]))
            if runner is None or not self._visible_runner(scope, runner, visible=True):
                return _not_found()
            if not self._editable(scope, runner):
                return _not_found()
            self.deleted_runners.append((runner.id, runner.name, self.runner_status(runner)))
            del self.runners[runner.id]
        return web.Response(status=204)

    async def register_runner(self, request: web.Request, kind: str) -> web.Response:
        scope, error = self._target(request, kind, write=True)
        if error is not None:
            return error
        assert scope is not None
        try:
            body = await request.json()
        except ValueError:
            body = {}
        name = body.get("name") if isinstance(body, dict) else None
        if not isinstance(name, str) or not name:
            return _error(422, "[Name]: Required")
        with self.lock:
            runner = Runner(
                id=self._next(),
                uuid=str(uuidlib.uuid4()),
                token=secrets.token_hex(20),
                name=name.encode()[:255].decode(errors="ignore"),
                owner_id=scope["owner_id"] if kind in ("org", "user") else 0,
                repo_id=scope["repo_id"] if kind == "repo" else 0,
                description=str(body.get("description") or ""),
                ephemeral=bool(body.get("ephemeral", False)),
            )
            self.runners[runner.id] = runner
            self.registered.append((runner.id, runner.name))
            answer = {"id": runner.id, "uuid": runner.uuid, "token": runner.token}
        return web.json_response(answer, status=201)

    async def registration_token(self, request: web.Request, kind: str) -> web.Response:
        _, error = self._target(request, kind, write=False)
        return error or web.json_response({"token": "deprecated-" + secrets.token_hex(8)})

    def _runner_json(self, runner: Runner) -> dict[str, Any]:
        return {
            "id": runner.id,
            "uuid": runner.uuid,
            "owner_id": runner.owner_id,
            "repo_id": runner.repo_id,
            "name": runner.name,
            "status": self.runner_status(runner),
            "version": runner.version,
            "labels": runner.labels,
            "description": runner.description,
            "ephemeral": runner.ephemeral,
        }

    # -- runner RPC (Connect, JSON encoding) ------------------------------------------------

    def _rpc_runner(self, request: web.Request) -> Runner | None:
        uuid = request.headers.get("x-runner-uuid", "")
        token = request.headers.get("x-runner-token", "")
        runner = next((r for r in self.runners.values() if r.uuid == uuid), None)
        if runner is None or not secrets.compare_digest(runner.token, token):
            return None
        runner.last_online = self.now()
        return runner

    def _reach(self, runner: Runner, job: Job) -> bool:
        if runner.repo_id:
            return job.repo_id == runner.repo_id
        if runner.owner_id:
            return job.owner_id == runner.owner_id
        return True

    def pick(self, runner: Runner, handle: str = "") -> Job | None:
        """PickTask: oldest-updated first, handle matched, runs_on ⊆ declared labels."""
        if runner.ephemeral and runner.tasks:
            return None
        candidates = sorted(
            (
                j
                for j in self.jobs.values()
                if j.status == "waiting" and j.task_id == 0 and not j.held
                and self._reach(runner, j)
            ),
            key=lambda j: (j.updated, j.id),
        )  # fmt: skip
        for job in candidates:
            if handle and job.handle != handle:
                continue
            if job.runs_on and set(job.runs_on) <= set(runner.labels or ()):
                job.status, job.task_id, job.runner_id = "running", self._next(), runner.id
                runner.tasks.append(job.task_id)
                return job
        return None

    async def rpc(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        with self.lock:
            runner = self._rpc_runner(request)
            if runner is None:
                return web.json_response(
                    {"code": "unauthenticated", "message": "unregistered runner"}, status=401
                )
            body = await request.json() if request.can_read_body else {}
            if method == "Declare":
                runner.version = str(body.get("version") or "")
                runner.labels = list(body.get("labels") or [])
                return web.json_response({"runner": self._runner_json(runner)})
            if method in ("FetchTask", "FetchSingleTask"):
                handle = str(body.get("handle") or "") if method == "FetchSingleTask" else ""
                job = self.pick(runner, handle)
                if job is None:
                    return web.json_response({"tasksVersion": "1"})
                task = {"id": str(job.task_id), "handle": job.handle, "jobId": str(job.id)}
                return web.json_response({"task": task, "tasksVersion": "1"})
            if method in ("UpdateTask", "UpdateLog"):
                runner.last_active = self.now()
                state = body.get("state") or {}
                result = str(state.get("result") or "")
                if method == "UpdateTask" and result and result != "RESULT_UNSPECIFIED":
                    task_id = int(state.get("id") or 0)
                    job = next((j for j in self.jobs.values() if j.task_id == task_id), None)
                    if job is not None:
                        job.status = result.removeprefix("RESULT_").lower()
                    if runner.ephemeral:
                        del self.runners[runner.id]
                return web.json_response({})
        return web.json_response({"code": "unimplemented"}, status=404)

    # -- server -----------------------------------------------------------------------------

    def app(self) -> web.Application:
        @web.middleware
        async def record(request: web.Request, handler: Any) -> web.StreamResponse:
            with self.lock:
                self.requests.append((request.method, request.path_qs))
                del self.requests[:-5000]
            return await handler(request)  # type: ignore[no-any-return]

        app = web.Application(middlewares=[record])
        add = app.router.add_route
        add("GET", "/api/forgejo/v1/version", self.forgejo_version)
        add("GET", "/api/v1/version", self.gitea_version)
        add("GET", "/api/v1/user", self.get_user)
        add("GET", "/api/v1/orgs/{org}", self.get_org)
        add("GET", "/api/v1/repos/{owner}/{repo}", self.get_repo)
        add("GET", "/api/v1/repositories/{id}", self.get_repo_by_id)
        add("GET", "/api/v1/admin/runners/jobs", self._as("admin", self.list_jobs))
        for kind, prefix in _prefixes():
            add("GET", f"{prefix}/actions/runners/jobs", self._as(kind, self.list_jobs))
            add("GET", f"{prefix}/actions/runners/registration-token",
                self._as(kind, self.registration_token))  # fmt: skip
            add("GET", f"{prefix}/actions/runners", self._as(kind, self.list_runners))
            add("POST", f"{prefix}/actions/runners", self._as(kind, self.register_runner))
            add("GET", f"{prefix}/actions/runners/{{id}}", self._as(kind, self.get_runner))
            add("DELETE", f"{prefix}/actions/runners/{{id}}", self._as(kind, self.delete_runner))
        add("POST", RPC + "{method}", self.rpc)
        return app

    @staticmethod
    def _as(kind: str, handler: Any) -> Any:
        async def scoped(request: web.Request) -> web.StreamResponse:
            return await handler(request, kind)  # type: ignore[no-any-return]

        return scoped

    async def start(self) -> web.AppRunner:
        runner = web.AppRunner(self.app())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return runner

    @contextmanager
    def in_thread(self) -> Iterator[FakeForgejo]:
        """Serve from a thread of its own (for tests that run the operator as a process)."""
        loop = asyncio.new_event_loop()
        started = threading.Event()
        holder: dict[str, web.AppRunner] = {}

        def serve() -> None:
            asyncio.set_event_loop(loop)
            holder["runner"] = loop.run_until_complete(self.start())
            started.set()
            loop.run_forever()

        thread = threading.Thread(target=serve, name="fake-forgejo", daemon=True)
        thread.start()
        started.wait(10)
        try:
            yield self
        finally:
            asyncio.run_coroutine_threadsafe(holder["runner"].cleanup(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()


def _prefixes() -> list[tuple[str, str]]:
    return [
        ("admin", "/api/v1/admin"),
        ("org", "/api/v1/orgs/{org}"),
        ("repo", "/api/v1/repos/{owner}/{repo}"),
        ("user", "/api/v1/user"),
    ]


def _runs_on(job: Job, wanted: list[str]) -> bool:
    """``ItRunsOn`` as the listing applies it (§1.2)."""
    labels = job.runs_on or []
    if not labels:
        return not wanted or wanted == [""] or wanted[0] == ""
    return set(labels) <= set(wanted)


def _job_json(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "attempt": job.attempt,
        "handle": job.handle,
        "repo_id": job.repo_id,
        "owner_id": job.owner_id,
        "name": job.name,
        "needs": job.needs,
        "runs_on": job.runs_on,
        "task_id": job.task_id,
        "status": job.status,
    }


def _repo_json(repo: Repo) -> dict[str, Any]:
    return {"id": repo.id, "name": repo.name, "full_name": f"{repo.owner}/{repo.name}"}


def _int(raw: str) -> int:
    return int(raw) if raw.isdigit() else 0  # non-numeric ids parse as 0 -> 404


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"message": message, "url": "https://forgejo.invalid/api/swagger"},
                             status=status)  # fmt: skip


def _not_found() -> web.Response:
    return web.json_response(
        {"message": "The target couldn't be found.", "url": "", "errors": []}, status=404
    )
