"""``gitea-runner-operator why <job URL>``: why one job waits, asked from a laptop.

It reads the RunnerGroups (spec and status) through the user's kubeconfig and the job from
Gitea with the token the user passes, then applies the operator's own rules offline
(reconcile/why/explain.py) and prints the answer. Reads only: it changes nothing anywhere, and
the token is sent to the job's Gitea and nowhere else, never printed.

The job URL is the API URL the ``UnmatchedJobs`` Event shows
(``https://gitea/api/v1/repos/OWNER/REPO/actions/jobs/ID``), or the page of a job in the web
UI (``https://gitea/OWNER/REPO/actions/runs/RUN/jobs/N``), which is looked up through the
run's job list.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import re
import ssl
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

import aiohttp
from kubernetes_asyncio import client, config

from gitea_runner_operator.api import constants
from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.runnergroup import InvalidSpec, parse_spec
from gitea_runner_operator.forge.client import GiteaClient
from gitea_runner_operator.forge.errors import GiteaError
from gitea_runner_operator.kube.clients import api_client
from gitea_runner_operator.reconcile.why.explain import GroupView, explain, render

_API = re.compile(r"^(?P<base>https?://.+?)/api/v1/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)"
                  r"/actions/jobs/(?P<job>\d+)/?$")  # fmt: skip
_WEB = re.compile(r"^(?P<base>https?://.+)/(?P<owner>[^/]+)/(?P<repo>[^/]+)"
                  r"/actions/runs/(?P<run>\d+)/jobs/(?P<job>\d+)/?$")  # fmt: skip


@dataclass(frozen=True, slots=True)
class JobRef:
    """Where a job lives: by its id (API URL) or by its run and place in it (web URL)."""

    base: str
    owner: str
    repo: str
    job: int
    run: int | None = None  # set for a web URL: ``job`` is then its index in the run

    @property
    def repo_path(self) -> str:
        return f"/api/v1/repos/{quote(self.owner, safe='')}/{quote(self.repo, safe='')}"


class UsageError(ValueError):
    pass


def parse_job_url(url: str) -> JobRef:
    url = url.strip().split("#", 1)[0].split("?", 1)[0]
    if m := _API.match(url):
        return JobRef(m["base"], m["owner"], m["repo"], int(m["job"]))
    if m := _WEB.match(url):
        return JobRef(m["base"], m["owner"], m["repo"], int(m["job"]), run=int(m["run"]))
    raise UsageError(
        f"{url!r} is not a job URL: pass .../api/v1/repos/OWNER/REPO/actions/jobs/ID (as the "
        "UnmatchedJobs Event shows it) or a job's page, .../OWNER/REPO/actions/runs/RUN/jobs/N"
    )


ReadGroups = Callable[[], Awaitable[list[dict[str, Any]]]]
ReadJob = Callable[[JobRef, str], Awaitable[ActionJob]]


def job_from_gitea(ca_file: Path | None = None) -> ReadJob:
    """Reads the job as Gitea shows it now (one or two GETs with the user's token),
    trusting the certificates of ``ca_file`` instead of the system's (a private CA)."""

    async def read(ref: JobRef, token: str) -> ActionJob:
        context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
            return await _read_job(session, ref, token)

    return read


async def _read_job(session: aiohttp.ClientSession, ref: JobRef, token: str) -> ActionJob:
    gitea = GiteaClient(session, ref.base, token, attempts=2)
    if ref.run is None:
        return ActionJob.model_validate(
            await gitea.call("GET", f"{ref.repo_path}/actions/jobs/{ref.job}")
        )
    body = await gitea.call("GET", f"{ref.repo_path}/actions/runs/{ref.run}/jobs")
    jobs = (body or {}).get("jobs") or []
    if not 0 <= ref.job < len(jobs):
        raise UsageError(f"run {ref.run} has no job number {ref.job} ({len(jobs)} jobs)")
    return ActionJob.model_validate(jobs[ref.job])


def groups_from_cluster(
    kubeconfig: str | None, context: str | None, namespace: str | None
) -> ReadGroups:
    async def read() -> list[dict[str, Any]]:
        await config.load_kube_config(config_file=kubeconfig, context=context)
        async with api_client() as api:
            custom = client.CustomObjectsApi(api)
            if namespace:
                listed = await custom.list_namespaced_custom_object(
                    constants.GROUP, constants.VERSION, namespace, constants.PLURAL
                )
            else:
                listed = await custom.list_cluster_custom_object(
                    constants.GROUP, constants.VERSION, constants.PLURAL
                )
        return list(listed.get("items") or [])

    return read


def group_views(objects: Sequence[dict[str, Any]]) -> list[GroupView]:
    views = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        try:
            spec = parse_spec(obj.get("spec"))
        except InvalidSpec:
            spec = None  # the operator runs nothing for it either
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        views.append(GroupView(key, spec, obj.get("status") or {}))
    return views


# The line the operator's --help shows for this subcommand.
SUMMARY = "explain why a queued job has no runner (reads only)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gitea-runner-operator why",
        description="Explain why a Gitea Actions job waits: which RunnerGroups could serve "
        "it, which one should, and what holds it back.",
    )
    p.add_argument("job_url", help="the job's API URL or its page in Gitea")
    token = p.add_mutually_exclusive_group(required=True)
    token.add_argument("--token", help="a Gitea token that can read the job's repository")
    token.add_argument("--token-file", type=Path, help="a file holding that token")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", help="kubeconfig context (default: the current context)")
    p.add_argument("--namespace", help="read RunnerGroups of this namespace only")
    p.add_argument(
        "--ca-file",
        type=Path,
        help="PEM CA certificates to trust for Gitea (default: the system's)",
    )
    return p


async def run(
    args: argparse.Namespace,
    *,
    read_groups: ReadGroups,
    read_job: ReadJob,
    out: TextIO,
    now: dt.datetime,
) -> int:
    try:
        ref = parse_job_url(args.job_url)
        token = args.token if args.token is not None else args.token_file.read_text().strip()
        if not token:
            raise UsageError("the token is empty")
        job = await read_job(ref, token)
    except (UsageError, OSError) as exc:
        print(f"why: {exc}", file=sys.stderr)
        return 2
    except GiteaError as exc:
        print(f"why: Gitea did not give the job: {exc}", file=sys.stderr)
        return 1
    try:
        objects = await read_groups()
    except Exception as exc:  # any cluster failure is reported, not raised
        print(f"why: cannot read RunnerGroups from the cluster: {exc}", file=sys.stderr)
        return 1
    print(render(explain(job, ref.base, group_views(objects)), now), file=out)
    return 0


def main(
    argv: Sequence[str],
    *,
    read_groups: ReadGroups | None = None,
    read_job: ReadJob | None = None,
    out: TextIO | None = None,
) -> int:
    args = build_parser().parse_args(argv)
    groups = read_groups or groups_from_cluster(args.kubeconfig, args.context, args.namespace)
    return asyncio.run(
        run(
            args,
            read_groups=groups,
            read_job=read_job or job_from_gitea(args.ca_file),
            out=out or sys.stdout,
            now=dt.datetime.now(dt.UTC),
        )
    )
