"""Reading one workflow job or run, and re-running a job (Gitea >= 1.27).

``POST /repos/{owner}/{repo}/actions/runs/{run}/jobs/{job_id}/rerun`` appeared in Gitea 1.27;
1.25 and 1.26 answer 404 (no such route), which becomes :class:`RerunUnsupported`. Gitea
re-runs only a run that is done (400 otherwise), as a new run attempt whose jobs get new
ids; ``run_attempt`` on jobs and runs tells attempts apart.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, ValidationError

from gitea_runner_operator.api.refs import is_repository
from gitea_runner_operator.api.scope import repository_in_url
from gitea_runner_operator.forge.client import GiteaClient
from gitea_runner_operator.forge.errors import GiteaError, GiteaNotFound, GiteaProtocolError


class RerunUnsupported(GiteaError):
    reason = "RerunUnsupported"


class RerunRefused(GiteaError):
    """Gitea said no (400/409/422): e.g. the run reached Gitea's MAX_RERUN_ATTEMPTS."""

    reason = "RerunRefused"


class WorkflowItem(BaseModel):
    """A job or a run as Gitea reports it, reduced to what a re-run decision reads."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: int
    status: str = ""
    conclusion: str = ""
    run_id: int = 0
    run_attempt: int = 0
    name: str = ""
    url: str = ""
    runner_id: int = 0
    runner_name: str = ""

    @property
    def done(self) -> bool:
        return self.status == "completed"


def repo_of(url: str) -> str:
    """``owner/name`` from a job's API URL, or "" when it does not look like one."""
    found = repository_in_url(url)
    return f"{found[0]}/{found[1]}" if found is not None else ""


def _repo_path(repo: str) -> str:
    """``/api/v1/repos/{owner}/{name}`` for a repository a loss record names: checked
    against Gitea's name grammar and escaped, so no record reaches another path."""
    if not is_repository(repo):
        raise GiteaProtocolError(f"{repo!r} is not an owner/name repository")
    owner, _, name = repo.partition("/")
    return f"/api/v1/repos/{quote(owner, safe='')}/{quote(name, safe='')}"


def _item(body: Any, what: str) -> WorkflowItem:
    try:
        return WorkflowItem.model_validate(body)
    except ValidationError:
        raise GiteaProtocolError(f"{what}: unexpected response shape") from None


async def get_job(client: GiteaClient, repo: str, job_id: int) -> WorkflowItem | None:
    return await _get(client, repo, "jobs", job_id, "job")


async def get_run(client: GiteaClient, repo: str, run_id: int) -> WorkflowItem | None:
    return await _get(client, repo, "runs", run_id, "run")


async def _get(
    client: GiteaClient, repo: str, kind: str, item_id: int, what: str
) -> WorkflowItem | None:
    """One job or run of the repository; None when Gitea no longer has it."""
    try:
        body = await client.call("GET", f"{_repo_path(repo)}/actions/{kind}/{int(item_id)}")
    except GiteaNotFound:
        return None
    return _item(body, f"{what} {item_id}")


async def rerun_job(client: GiteaClient, repo: str, run_id: int, job_id: int) -> WorkflowItem:
    """Re-run one job of a finished run; returns the new attempt's job."""
    path = f"{_repo_path(repo)}/actions/runs/{int(run_id)}/jobs/{int(job_id)}/rerun"
    try:
        body = await client.call("POST", path)
    except GiteaNotFound:
        raise RerunUnsupported(
            f"POST {path}: 404: re-running a job through the API needs Gitea >= 1.27"
        ) from None
    except GiteaError as exc:
        if type(exc) is not GiteaError:
            raise
        if "HTTP 405" in str(exc):  # a route of that path, but not for POST: still too old
            raise RerunUnsupported(
                f"POST {path}: 405: re-running a job through the API needs Gitea >= 1.27"
            ) from None
        raise RerunRefused(str(exc)) from None  # 400/409/422: a definite no
    return _item(body, f"re-run of job {job_id}")
