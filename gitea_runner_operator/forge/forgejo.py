"""An asyncio Forgejo (>= 15) Actions client with the Gitea client's interface.

It subclasses :class:`~gitea_runner_operator.forge.client.GiteaClient` for the one request
path (retries, statuses, no redirects, token only in the header) and overrides what Forgejo
does differently, mapping every answer onto the values the Gitea path produces, so the
observer, the reaper and every decision stay forge-blind:

- jobs: ``GET {scope}/actions/runners/jobs``: a bare array, ``null`` when empty, unpaged and
  uncapped (bounded here by ``forge/limits.py`` alone), newest first, only ``waiting`` and
  ``running``. ``waiting`` becomes ``queued`` and ``running`` becomes ``in_progress``
  (Gitea's names); a waiting job with an empty ``runs_on`` is dropped, since Forgejo hands
  it to no runner. Forgejo has no job URL, so one in Gitea's form is made from the
  repository's name (looked up once per repository id) so that exact accounting can tell
  which groups' scopes cover the job;
- runners: a bare array with ``X-Total-Count``, ``page``/``limit`` paging (50 at most), and
  ``idle``/``active``/``offline`` instead of ``online`` and ``busy``: ``active`` (a task
  report within 10 s) is the only busy signal Forgejo gives;
- no disabling: :meth:`set_runner_disabled` answers None, as for a Gitea without the feature;
- registration: :meth:`register_runner` (``POST {scope}/actions/runners``) returns a runner's
  own uuid and token, which only the caller ever sees.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError

from gitea_runner_operator.api.forge import ForgejoJob, ForgejoRunner, RegisteredRunner
from gitea_runner_operator.api.gitea import ActionJob, ActionRunner, Listing, RunnerLabelPayload
from gitea_runner_operator.api.refs import is_repository
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.forge.client import GiteaClient
from gitea_runner_operator.forge.errors import GiteaError, GiteaNotFound, GiteaProtocolError
from gitea_runner_operator.forge.limits import check_page
from gitea_runner_operator.forge.scope import ScopeRef
from gitea_runner_operator.kit.lru import LRU

# Forgejo clamps ``limit`` to MAX_RESPONSE_ITEMS (50 by default).
RUNNER_PAGE = 50
# Repository names remembered by id, for job URLs; a bound, not a working-set estimate.
REPO_NAME_CACHE = 4096

_JOBS: TypeAdapter[list[ForgejoJob] | None] = TypeAdapter(list[ForgejoJob] | None)
_RUNNERS: TypeAdapter[list[ForgejoRunner] | None] = TypeAdapter(list[ForgejoRunner] | None)

# Forgejo status -> the Gitea API name the decisions use.
_JOB_STATUS = {"waiting": "queued", "running": "in_progress"}


class _Counted:
    """A list body with its ``X-Total-Count``; only this module ever sees one."""

    __slots__ = ("body", "total")

    def __init__(self, body: list[Any], total: int | None) -> None:
        self.body, self.total = body, total


def jobs_path(scope: ScopeRef) -> str:
    return f"{scope.prefix}/actions/runners/jobs"


def to_action_job(job: ForgejoJob, url: str = "") -> ActionJob | None:
    """Forgejo's job as the Gitea path's value; None for what is never demand or work."""
    status = _JOB_STATUS.get(job.status)
    if status is None:
        return None
    labels = tuple(job.runs_on or ())
    if status == "queued" and not labels:
        return None  # ItRunsOn is false for empty job labels: no runner ever gets it
    return ActionJob(
        id=job.id, name=job.name, labels=labels, status=status, url=url, handle=job.handle
    )


def to_action_runner(runner: ForgejoRunner) -> ActionRunner:
    """``active`` (task reports within 10 s) is Forgejo's only busy signal; ``idle`` and
    ``active`` are both online."""
    return ActionRunner(
        id=runner.id,
        name=runner.name,
        status="offline" if runner.status in ("offline", "") else "online",
        busy=runner.status == "active",
        ephemeral=runner.ephemeral,
        labels=tuple(RunnerLabelPayload(name=n) for n in runner.labels or ()),
    )


class RepoNames:
    """Repository names by id, least recently used dropped first. Keep one per instance and
    token (what one token may see must never answer for another) across observations."""

    def __init__(self, size: int = REPO_NAME_CACHE) -> None:
        self._names: LRU[int, str] = LRU(size)

    def get(self, repo_id: int) -> str | None:
        return self._names.get(repo_id)

    def put(self, repo_id: int, name: str) -> None:
        self._names.put(repo_id, name)

    def __len__(self) -> int:
        return len(self._names)


class ForgejoClient(GiteaClient):
    """Calls one Forgejo >= 15 instance with one token (see the module docstring)."""

    def __init__(self, *args: Any, repo_names: RepoNames | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._repo_names = repo_names if repo_names is not None else RepoNames()

    def __repr__(self) -> str:  # never show the token
        return f"ForgejoClient({self.base_url!r})"

    # -- jobs -----------------------------------------------------------------------------------

    async def list_forgejo_jobs(
        self, scope: ScopeRef, labels: frozenset[str] | None = None
    ) -> list[ForgejoJob]:
        """The raw listing. ``labels``: send ``labels=`` (job ``runs_on`` ⊆ labels, exact and
        case-sensitive, names only); None sends no filter."""
        params = {"labels": ",".join(sorted(labels))} if labels is not None else None
        body = await self.call("GET", jobs_path(scope), params)
        if isinstance(body, _Counted):
            body = body.body
        if isinstance(body, list):  # unpaged: bounded by the answer's and the budget's caps
            self._spend_items(len(body), f"GET {jobs_path(scope)}")
        try:
            if isinstance(body, list):
                return self._within_caps(ForgejoJob, body, f"GET {jobs_path(scope)}")
            return _JOBS.validate_python(body) or []
        except ValidationError as exc:
            raise GiteaProtocolError(
                f"{jobs_path(scope)}: unexpected response shape ({exc.error_count()} errors)"
            ) from None

    async def list_active_jobs(
        self, scope: ScopeRef
    ) -> tuple[Listing[ActionJob], Listing[ActionJob]]:
        """Queued (``waiting``) and in-progress (``running``) jobs from one request."""
        try:
            raw = await self.list_forgejo_jobs(scope)
        except GiteaNotFound:
            raise GiteaNotFound(
                f"{jobs_path(scope)} is missing: listing Actions jobs needs Forgejo >= 15"
            ) from None
        by_status: dict[str, list[ActionJob]] = {"queued": [], "in_progress": []}
        for job in raw:
            mapped = to_action_job(job, await self._job_url(scope, job))
            if mapped is not None:
                by_status[mapped.status].append(mapped)
        # Forgejo answers newest first; the Gitea path lists oldest first.
        return tuple(
            Listing(tuple(sorted(jobs, key=lambda j: j.id)), complete=True)
            for jobs in (by_status["queued"], by_status["in_progress"])
        )  # type: ignore[return-value]

    async def list_jobs(
        self, scope: ScopeRef, status: str = "queued", *_paging: object, **_order: object
    ) -> Listing[ActionJob]:
        """Jobs of the scope in one Gitea API status: ``queued`` (Forgejo ``waiting``) or
        ``in_progress`` (``running``). Forgejo lists nothing final: ``completed`` is empty.
        Always complete and sorted by id: Forgejo does not page this list, so the Gitea
        client's paging (``max_pages``) and order (``newest_first``) are taken and unused."""
        if status not in ("queued", "in_progress"):
            return Listing((), complete=True)
        queued, running = await self.list_active_jobs(scope)
        return queued if status == "queued" else running

    async def _job_url(self, scope: ScopeRef, job: ForgejoJob) -> str:
        """A Gitea-style job URL naming the repository, which accounting reads; empty when
        the repository cannot be named (then the job counts as in every listing group's
        scope, as a Gitea job without URL does)."""
        if scope.scope is Scope.REPO:
            full = f"{scope.org}/{scope.repo}"
        else:
            full = await self._repo_name(job.repo_id)
        return f"{self.base_url}/api/v1/repos/{full}/actions/jobs/{job.id}" if full else ""

    async def _repo_name(self, repo_id: int) -> str:
        if repo_id <= 0:
            return ""
        if (known := self._repo_names.get(repo_id)) is not None:
            return known
        try:
            body = await self.call("GET", f"/api/v1/repositories/{repo_id}")
        except GiteaError:
            return ""  # a repository the token cannot see: leave the job unnamed
        full = body.get("full_name") if isinstance(body, dict) else None
        # Gitea's grammar (100 characters a part): a longer name would be kept per repository
        # and put into every job's URL, so it is refused like one the token cannot see.
        if not isinstance(full, str) or not is_repository(full):
            return ""
        self._repo_names.put(repo_id, full)
        return full

    # -- runners --------------------------------------------------------------------------------

    async def list_forgejo_runners(
        self, scope: ScopeRef, *, visible: bool = False
    ) -> tuple[list[ForgejoRunner], bool]:
        """Every runner of the scope (the admin scope: global runners only, unless
        ``visible``), paged by ``X-Total-Count``; False when the page cap cut it short."""
        seen: dict[int, ForgejoRunner] = {}
        params = {"limit": str(RUNNER_PAGE)} | ({"visible": "true"} if visible else {})
        for page in range(1, self.max_pages + 1):
            body = await self.call("GET", scope.runners_path, params | {"page": str(page)})
            total = body.total if isinstance(body, _Counted) else None
            items = body.body if isinstance(body, _Counted) else body
            if isinstance(items, list):
                where = f"GET {scope.runners_path}"
                check_page(len(items), RUNNER_PAGE, f"{where} page {page}")
                self._spend_items(len(items), where)
            try:
                runners = (
                    self._within_caps(ForgejoRunner, items, f"GET {scope.runners_path}")
                    if isinstance(items, list)
                    else _RUNNERS.validate_python(items) or []
                )
            except ValidationError as exc:
                raise GiteaProtocolError(
                    f"{scope.runners_path}: unexpected response shape ({exc.error_count()} errors)"
                ) from None
            for runner in runners:  # ordered by last_online: pages may overlap while it moves
                seen[runner.id] = runner
            if not runners or (total is not None and len(seen) >= total):
                return list(seen.values()), True
            if total is None and len(runners) < RUNNER_PAGE:
                return list(seen.values()), True
        return list(seen.values()), False

    async def list_runners(self, scope: ScopeRef) -> Listing[ActionRunner]:
        try:
            runners, complete = await self.list_forgejo_runners(scope)
        except GiteaNotFound:
            raise GiteaNotFound(f"{scope.runners_path} is missing: not a Forgejo >= 15") from None
        return Listing(tuple(to_action_runner(r) for r in runners), complete)

    @staticmethod
    def _runner(body: Any, runner_id: int) -> ActionRunner:
        try:
            return to_action_runner(ForgejoRunner.model_validate(body))
        except ValidationError:
            raise GiteaProtocolError(f"runner {runner_id}: unexpected response shape") from None

    async def set_runner_disabled(
        self, scope: ScopeRef, runner_id: int, disabled: bool
    ) -> ActionRunner | None:
        """Forgejo cannot disable a runner (no PATCH): nothing is sent."""
        return None

    async def register_runner(
        self, scope: ScopeRef, name: str, description: str = ""
    ) -> RegisteredRunner:
        """A new ephemeral runner of the scope, with its own credentials. Its labels are
        declared by the runner itself when it starts."""
        body = await self.call(
            "POST",
            scope.runners_path,
            json_body={"name": name, "description": description, "ephemeral": True},
        )
        try:
            runner_id, uuid, token = body["id"], body["uuid"], body["token"]
        except (TypeError, KeyError):
            raise GiteaProtocolError(f"POST {scope.runners_path}: unexpected response") from None
        if not (isinstance(runner_id, int) and isinstance(uuid, str) and isinstance(token, str)):
            raise GiteaProtocolError(f"POST {scope.runners_path}: unexpected response")
        if not uuid or not token:
            raise GiteaProtocolError(f"POST {scope.runners_path}: empty credentials")
        return RegisteredRunner(runner_id, uuid, token)

    # -- plumbing -------------------------------------------------------------------------------

    def _interpret(
        self, method: str, path: str, status: int, headers: Mapping[str, str], value: Any
    ) -> Any:
        value = super()._interpret(method, path, status, headers, value)
        if method == "GET" and isinstance(value, list):
            raw = headers.get("X-Total-Count")
            total = int(raw) if raw is not None and raw.strip().isdigit() else None
            return _Counted(value, total)
        return value
