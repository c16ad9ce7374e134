"""Smoke run against the oldest and the newest Gitea release the operator supports.

The rest of the suite runs against the testbed's default Gitea (the newest supported
release, 1.27.x). These tests start a Gitea-only sandbox per release, the oldest supported
one (1.25.x) and the default, and check with the operator's own aiohttp client the API
facts the operator depends on, so that an API difference between the releases shows up
here and not at a user's site: queued jobs at admin/org/repo scope, the runners list, GET
and DELETE of one runner, and what "disable runner" (PATCH, Gitea >= 1.26) answers.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gitea_runner_operator.api.gitea import OwnerKind
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.forge.client import GiteaClient
from gitea_runner_operator.forge.reruns import RerunRefused, RerunUnsupported, get_job, rerun_job
from gitea_runner_operator.forge.scope import ScopeRef
from tests.testbed import build
from tests.testbed.gitea_api import GiteaAPI, GiteaError
from tests.testbed.kubelet_harness import runner_binary
from tests.testbed.pytest_plugin import COLD_BUILD_HINT, unique_name
from tests.testbed.pytest_plugin import testbed_required as _testbed_required
from tests.testbed.sandbox import Sandbox, gitea_component

pytestmark = pytest.mark.integration

# What each supported release must answer: its version series, and the HTTP status of
# PATCH .../actions/runners/{id} {"disabled": true} (1.25 has no such route).
RELEASES = {
    "oldest": {"series": "1.25.", "patch_status": 405},
    "default": {"series": "1.27.", "patch_status": 200},
}

WORKFLOW = """\
name: ci
on: [push]
jobs:
  build:
    runs-on: [self-hosted, gro-versions]
    steps:
      - run: echo hello
"""


@pytest.fixture(scope="module", params=sorted(RELEASES))
def release(request: pytest.FixtureRequest) -> str:
    """Which supported release the module's sandbox runs: ``oldest`` or ``default``."""
    return str(request.param)


@pytest.fixture(scope="module")
def old_gitea(release: str) -> Iterator[Sandbox]:
    """A Gitea-only sandbox running one supported release (built first if needed)."""
    comp = gitea_component(release)
    if not build.is_built(comp) and shutil.which("go") is None:
        msg = f"Gitea ({comp}) is not built and `go` is not on PATH: {COLD_BUILD_HINT}"
        if _testbed_required():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    sb = Sandbox(kube="none", gitea_version=release)
    try:
        sb.start()
    except Exception as e:
        sb.stop(keep=True)
        pytest.fail(f"Gitea {release} failed to start ({type(e).__name__}): {e}", pytrace=False)
    try:
        yield sb
    finally:
        sb.stop()


@pytest.fixture(scope="module")
def api(old_gitea: Sandbox) -> GiteaAPI:
    assert old_gitea.gitea_url and old_gitea.gitea_token
    return GiteaAPI(old_gitea.gitea_url, old_gitea.gitea_token)


@pytest.fixture(scope="module")
def repo(api: GiteaAPI) -> tuple[str, str, int]:
    """org/repo with one workflow pushed; returns (org, repo, id of its queued job)."""
    org, name = unique_name("org"), unique_name("repo")
    api.create_org(org)
    api.create_repo(org, name)
    api.push_workflow(org, name, "ci", WORKFLOW)
    jobs = api.wait_for_jobs(org, name, status="queued", count=1)
    return org, name, int(jobs[0]["id"])


def _scopes(org: str, name: str) -> dict[str, ScopeRef]:
    return {
        "admin": ScopeRef(Scope.GLOBAL),
        "org": ScopeRef(Scope.ORG, org=org, owner_kind=OwnerKind.ORG),
        "repo": ScopeRef(Scope.REPO, org=org, repo=name),
    }


def _with_client(sb: Sandbox, fn: Any) -> Any:
    """Run ``fn(client)`` with the operator's GiteaClient on a fresh session."""

    async def go() -> Any:
        assert sb.gitea_url and sb.gitea_token
        async with aiohttp.ClientSession() as session:
            return await fn(GiteaClient(session, sb.gitea_url, sb.gitea_token))

    return asyncio.run(go())


def test_sandbox_runs_the_chosen_release(api: GiteaAPI, release: str) -> None:
    assert api.version().startswith(RELEASES[release]["series"]), api.version()


@pytest.mark.parametrize("scope", ["admin", "org", "repo"])
def test_queued_jobs_listed_at_every_scope(
    old_gitea: Sandbox, api: GiteaAPI, repo: tuple[str, str, int], scope: str
) -> None:
    org, name, job_id = repo
    ref = _scopes(org, name)[scope]
    raw = api.get(ref.jobs_path.removeprefix("/api/v1"), status="queued")
    assert set(raw) == {"jobs", "total_count"}, raw
    assert raw["total_count"] >= 1
    raw_job = next(j for j in raw["jobs"] if j["id"] == job_id)
    assert raw_job["status"] == "queued"
    assert "runner_id" not in raw_job and "conclusion" not in raw_job, raw_job
    listing = _with_client(old_gitea, lambda c: c.list_jobs(ref, "queued"))
    assert listing.complete
    mine = [j for j in listing.items if j.id == job_id]
    assert len(mine) == 1, listing.items
    assert mine[0].status == "queued"
    assert set(mine[0].labels) == {"self-hosted", "gro-versions"}
    assert mine[0].runner_id == 0  # unclaimed: a queued job has no runner_id key


def _register(sb: Sandbox, api: GiteaAPI, org: str, runner_name: str, cwd: Path) -> int:
    """Register one (offline) runner to the org as a runner Pod would; return its id."""
    token = api.registration_token("org", org)
    assert sb.gitea_url
    subprocess.run(
        [str(runner_binary()), "register", "--no-interactive", "--ephemeral",
         "--instance", sb.gitea_url, "--token", token,
         "--name", runner_name, "--labels", "gro-versions-none"],
        cwd=cwd, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    runners = {r["name"]: r for r in api.list_runners("org", org)}
    return int(runners[runner_name]["id"])


def test_runner_list_get_disable_delete(
    old_gitea: Sandbox, api: GiteaAPI, repo: tuple[str, str, int], tmp_path: Path, release: str
) -> None:
    org, name, _ = repo
    ref = _scopes(org, name)["org"]
    runner_name = unique_name("runner")
    rid = _register(old_gitea, api, org, runner_name, tmp_path)

    listing = _with_client(old_gitea, lambda c: c.list_runners(ref))
    assert [r.name for r in listing.items if r.id == rid] == [runner_name]
    got = _with_client(old_gitea, lambda c: c.get_runner(ref, rid))
    assert got is not None and got.name == runner_name and got.ephemeral
    path = f"{ref.runners_path.removeprefix('/api/v1')}/{rid}"
    if RELEASES[release]["patch_status"] == 405:
        # 1.25: no "disabled" field and no PATCH route; Gitea answers 405, the operator's
        # client reports "cannot disable" (None) instead of raising, the runner is untouched.
        assert "disabled" not in api.get(path)
        with pytest.raises(GiteaError) as err:
            api.request("PATCH", path, {"disabled": True})
        assert err.value.status == 405
        assert _with_client(old_gitea, lambda c: c.set_runner_disabled(ref, rid, True)) is None
        assert _with_client(old_gitea, lambda c: c.get_runner(ref, rid)) is not None
    else:
        # >= 1.26: the runner says whether it is disabled, and PATCH disables it.
        assert api.get(path)["disabled"] is False
        after = _with_client(old_gitea, lambda c: c.set_runner_disabled(ref, rid, True))
        assert after is not None and after.id == rid
        assert api.get(path)["disabled"] is True

    assert _with_client(old_gitea, lambda c: c.delete_runner(ref, rid)) is True
    assert _with_client(old_gitea, lambda c: c.get_runner(ref, rid)) is None
    assert _with_client(old_gitea, lambda c: c.delete_runner(ref, rid)) is False
    assert runner_name not in {r["name"] for r in api.list_runners("org", org)}


def test_job_rerun_endpoint(
    old_gitea: Sandbox, api: GiteaAPI, repo: tuple[str, str, int], release: str
) -> None:
    """Re-running a job after a lost runner (README, "Lost runners") needs Gitea 1.27's
    endpoint: 1.25 has none (the operator records "unsupported"); 1.27 refuses a run that is
    not done yet (400), which the operator never asks for (it waits for the run to end)."""
    org, name, job_id = repo
    full = f"{org}/{name}"
    job = _with_client(old_gitea, lambda c: get_job(c, full, job_id))
    assert job is not None and job.id == job_id and job.status == "queued"

    async def attempt(client: GiteaClient) -> str:
        try:
            await rerun_job(client, full, job.run_id, job_id)
        except RerunUnsupported:
            return "unsupported"
        except RerunRefused:
            return "refused"
        return "re-run"

    expected = {"oldest": "unsupported", "default": "refused"}[release]
    assert _with_client(old_gitea, attempt) == expected
