"""The Forgejo client against the fake Forgejo (tests/support/fake_forgejo.py), which follows the
Forgejo 15 reference; a real Forgejo cannot be built here. Cases tagged [inf] in the reference
(null bodies, unpaged lists, deleting a busy runner) are asserted explicitly."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from gitea_runner_operator.api.forge import Flavor, forgejo_supported
from gitea_runner_operator.api.gitea import OwnerKind
from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.forge.client import GiteaClient
from gitea_runner_operator.forge.errors import GiteaForbidden, GiteaNotFound
from gitea_runner_operator.forge.flavor import client_for, detect
from gitea_runner_operator.forge.forgejo import ForgejoClient, RepoNames
from gitea_runner_operator.forge.scope import ScopeRef
from tests.support.fake_forgejo import FakeForgejo

ADMIN = ScopeRef(Scope.GLOBAL)
ORG = ScopeRef(Scope.ORG, "acme")
REPO = ScopeRef(Scope.REPO, "acme", "app")
USER = ScopeRef(Scope.ORG, "alice", owner_kind=OwnerKind.USER)


@pytest.fixture
async def forgejo():
    fake = FakeForgejo()
    fake.admin_token = fake.add_user("root", admin=True)
    fake.alice_token = fake.add_user("alice")
    fake.add_org("acme", owners=("alice",))
    fake.add_repo("acme", "app")
    fake.add_repo("acme", "lib")
    fake.add_repo("alice", "dotfiles")
    runner = await fake.start()
    yield fake
    await runner.cleanup()


@pytest.fixture
async def session():
    async with aiohttp.ClientSession() as s:
        yield s


def client(session, fake, token=None) -> ForgejoClient:
    return ForgejoClient(session, fake.url, token or fake.admin_token, attempts=1)


async def declared(fake: FakeForgejo, c: ForgejoClient, name: str) -> Any:
    """A runner registered in ORG that declared the label ``docker``, as forgejo-runner starts."""
    reg = await c.register_runner(ORG, name)
    await rpc(fake, reg, "Declare", {"labels": ["docker"]})
    return reg


class RPCRefused(Exception):
    pass


async def rpc(fake, reg, method, body):
    """What forgejo-runner sends (Connect, JSON encoding), with the registration's own pair."""
    async with aiohttp.ClientSession() as s, s.post(
        f"{fake.url}/api/actions/runner.v1.RunnerService/{method}",
        data=json.dumps(body),
        headers={"x-runner-uuid": reg.uuid, "x-runner-token": reg.token,
                 "Content-Type": "application/json"},
    ) as resp:  # fmt: skip
        if resp.status != 200:
            raise RPCRefused(resp.status)
        return await resp.json()


async def test_detection_tells_forgejo_from_gitea(forgejo, session):
    info = await detect(client(session, forgejo))
    assert info.flavor is Flavor.FORGEJO and info.version == "15.0.3+gitea-1.22.0"
    assert forgejo_supported(info.version)
    forgejo.version = "14.0.3+gitea-1.22.0"
    assert not forgejo_supported((await detect(client(session, forgejo))).version)
    assert isinstance(client_for(Flavor.FORGEJO, session, forgejo.url, "t"), ForgejoClient)
    assert type(client_for(Flavor.GITEA, session, forgejo.url, "t")) is GiteaClient


async def test_detection_sends_the_token_for_require_signin_view(forgejo, session):
    forgejo.require_signin_view = True
    assert (await detect(client(session, forgejo))).flavor is Flavor.FORGEJO
    anonymous = GiteaClient(session, forgejo.url, "", attempts=1)
    anonymous._headers.pop("Authorization")
    with pytest.raises(GiteaForbidden):
        await detect(anonymous)


async def test_an_empty_job_list_is_null_and_reads_as_no_jobs(forgejo, session):
    raw = await client(session, forgejo).call("GET", "/api/v1/admin/actions/runners/jobs")
    assert raw is None  # [inf] a nil slice encodes as null
    listing = await client(session, forgejo).list_jobs(ADMIN)
    assert listing.items == () and listing.complete


async def test_demand_is_waiting_jobs_with_runs_on_mapped_to_gitea_values(forgejo, session):
    a = forgejo.add_job("acme", "app", ["docker"])
    forgejo.add_job("acme", "app", None)  # never handed to any runner
    forgejo.add_job("acme", "app", ["docker"], status="blocked")
    forgejo.add_job("acme", "app", ["docker"], status="success")
    r = forgejo.add_job("acme", "lib", ["docker"], status="running")
    c = client(session, forgejo)
    queued = (await c.list_jobs(ORG, "queued")).items
    assert [(j.id, j.status, j.labels, j.handle) for j in queued] == [
        (a.id, "queued", ("docker",), a.handle)
    ]
    assert queued[0].url.endswith(f"/api/v1/repos/acme/app/actions/jobs/{a.id}")
    running = (await c.list_jobs(ORG, "in_progress")).items
    assert [(j.id, j.status) for j in running] == [(r.id, "in_progress")]
    assert running[0].url.endswith(f"/repos/acme/lib/actions/jobs/{r.id}")
    assert (await c.list_jobs(ORG, "completed")).items == ()


async def test_scopes_list_their_own_jobs(forgejo, session):
    app = forgejo.add_job("acme", "app", ["x"])
    lib = forgejo.add_job("acme", "lib", ["x"])
    own = forgejo.add_job("alice", "dotfiles", ["x"])
    c = client(session, forgejo)
    ids = lambda listing: sorted(j.id for j in listing.items)  # noqa: E731
    assert ids(await c.list_jobs(ADMIN)) == sorted([app.id, lib.id, own.id])
    assert ids(await c.list_jobs(ORG)) == sorted([app.id, lib.id])
    assert ids(await c.list_jobs(REPO)) == [app.id]
    alice = client(session, forgejo, forgejo.alice_token)
    assert ids(await alice.list_jobs(USER)) == [own.id]
    assert ids(await alice.list_jobs(REPO)) == [app.id]  # owner of the owning org


async def test_raw_listing_is_newest_first_and_unpaged(forgejo, session):
    made = [forgejo.add_job("acme", "app", ["x"]).id for _ in range(70)]
    raw = await client(session, forgejo).list_forgejo_jobs(ORG)
    assert [j.id for j in raw] == sorted(made, reverse=True)  # 70 > 50: one unpaged answer
    mapped = (await client(session, forgejo).list_jobs(ORG)).items
    assert [j.id for j in mapped] == sorted(made)  # oldest first, as the Gitea path


async def test_label_filter_is_subset_exact_and_case_sensitive(forgejo, session):
    both = forgejo.add_job("acme", "app", ["docker", "amd64"])
    one = forgejo.add_job("acme", "app", ["docker"])
    upper = forgejo.add_job("acme", "app", ["Docker"])
    empty = forgejo.add_job("acme", "app", [])
    c = client(session, forgejo)

    async def ids(labels):
        return sorted(j.id for j in await c.list_forgejo_jobs(ORG, labels))

    assert await ids(frozenset({"docker"})) == [one.id]
    assert await ids(frozenset({"docker", "amd64", "extra"})) == sorted([both.id, one.id])
    assert await ids(frozenset({"Docker"})) == [upper.id]
    assert await ids(frozenset()) == [empty.id]  # present but empty: empty runs_on only
    assert len(await c.list_forgejo_jobs(ORG)) == 4  # absent: no filter


async def test_permissions_follow_the_reference(forgejo, session):
    alice = client(session, forgejo, forgejo.alice_token)
    with pytest.raises(GiteaForbidden):
        await alice.list_jobs(ADMIN)  # not a site admin
    bob = forgejo.add_user("bob")
    with pytest.raises(GiteaForbidden):
        await client(session, forgejo, bob).list_jobs(ORG)  # not an org owner
    read_only = forgejo.add_token("alice", "read:organization")
    ro = client(session, forgejo, read_only)
    assert (await ro.list_jobs(ORG)).complete
    with pytest.raises(GiteaForbidden):
        await ro.register_runner(ORG, "x")  # POST needs write:organization
    with pytest.raises(GiteaNotFound):
        await client(session, forgejo).list_jobs(ScopeRef(Scope.ORG, "nope"))


async def test_registration_gives_each_runner_its_own_credentials(forgejo, session):
    c = client(session, forgejo, forgejo.alice_token)
    first = await c.register_runner(ORG, "same-name")
    second = await c.register_runner(ORG, "same-name")
    assert first.id != second.id and first.uuid != second.uuid and first.token != second.token
    assert len(first.token) == 40 and first.token not in repr(first)
    listed = (await c.list_runners(ORG)).items
    assert {r.id for r in listed} == {first.id, second.id}
    assert all(r.ephemeral and not r.online and not r.busy and r.labels == () for r in listed)
    with pytest.raises(Exception, match="422"):
        await c.call("POST", ORG.runners_path, json_body={"ephemeral": True})


async def test_runner_statuses_map_to_online_and_busy(forgejo, session):
    c = client(session, forgejo)
    reg = await c.register_runner(ORG, "r1")
    job = forgejo.add_job("acme", "app", ["docker"])
    await rpc(forgejo, reg, "Declare", {"version": "v12.13.2", "labels": ["docker"]})
    runner = await c.get_runner(ORG, reg.id)
    assert runner is not None and runner.online and not runner.busy  # idle
    task = await rpc(forgejo, reg, "FetchSingleTask", {"tasksVersion": 0, "handle": job.handle})
    assert task["task"]["handle"] == job.handle
    await rpc(forgejo, reg, "UpdateLog", {})
    runner = await c.get_runner(ORG, reg.id)
    assert runner is not None and runner.busy  # active
    forgejo.advance(61)
    runner = await c.get_runner(ORG, reg.id)
    assert runner is not None and not runner.online and not runner.busy  # offline
    assert await c.set_runner_disabled(ORG, reg.id, True) is None  # no disabling in Forgejo


async def test_handle_binding_takes_that_attempt_or_nothing(forgejo, session):
    c = client(session, forgejo)
    older = forgejo.add_job("acme", "app", ["docker"])
    mine = forgejo.add_job("acme", "app", ["docker"])
    reg = await declared(forgejo, c, "bound")
    got = await rpc(forgejo, reg, "FetchSingleTask", {"tasksVersion": 0, "handle": mine.handle})
    assert got["task"]["jobId"] == str(mine.id)  # not the older one it would take unbound
    assert forgejo.jobs[older.id].status == "waiting"
    # Ephemeral: a second fetch gets nothing, whatever the handle.
    assert "task" not in await rpc(forgejo, reg, "FetchTask", {"tasksVersion": 0})
    gone = await declared(forgejo, c, "stale")
    stale = forgejo.rerun(older.id).handle
    forgejo.rerun(older.id)  # the handle is regenerated: the old one names nothing now
    assert "task" not in await rpc(forgejo, gone, "FetchSingleTask", {"handle": stale})


async def test_concurrency_held_jobs_are_listed_but_never_picked(forgejo, session):
    c = client(session, forgejo)
    held = forgejo.add_job("acme", "app", ["docker"], held=True)
    assert [j.id for j in (await c.list_jobs(ORG)).items] == [held.id]
    reg = await declared(forgejo, c, "r")
    assert "task" not in await rpc(forgejo, reg, "FetchSingleTask", {"handle": held.handle})


async def test_deleting_a_busy_runner_leaves_its_job_running(forgejo, session):
    c = client(session, forgejo)
    job = forgejo.add_job("acme", "app", ["docker"])
    reg = await declared(forgejo, c, "busy")
    await rpc(forgejo, reg, "FetchSingleTask", {"handle": job.handle})
    await rpc(forgejo, reg, "UpdateTask", {"state": {"id": forgejo.jobs[job.id].task_id}})
    assert (await c.get_runner(ORG, reg.id)).busy
    assert await c.delete_runner(ORG, reg.id)  # no status check
    assert forgejo.jobs[job.id].status == "running"  # [inf] until the zombie-task cron
    assert [j.id for j in (await c.list_jobs(ORG, "in_progress")).items] == [job.id]
    assert await c.delete_runner(ORG, reg.id) is False  # gone
    with pytest.raises(RPCRefused):
        await rpc(forgejo, reg, "FetchTask", {})  # its credentials stop working at once


async def test_a_final_report_removes_an_ephemeral_runner(forgejo, session):
    c = client(session, forgejo)
    job = forgejo.add_job("acme", "app", ["docker"])
    reg = await declared(forgejo, c, "done")
    await rpc(forgejo, reg, "FetchSingleTask", {"handle": job.handle})
    task_id = forgejo.jobs[job.id].task_id
    await rpc(forgejo, reg, "UpdateTask", {"state": {"id": task_id, "result": "RESULT_SUCCESS"}})
    assert await c.get_runner(ORG, reg.id) is None
    assert forgejo.jobs[job.id].status == "success"


async def test_runner_list_pages_by_total_count_and_admin_lists_global_only(forgejo, session):
    c = client(session, forgejo)
    made = {(await c.register_runner(ADMIN, f"g{i}")).id for i in range(57)}
    org_runner = await client(session, forgejo, forgejo.alice_token).register_runner(ORG, "o")
    runners, complete = await c.list_forgejo_runners(ADMIN)
    assert complete and {r.id for r in runners} == made  # two pages (limit capped at 50)
    pages = [p for m, p in forgejo.requests if m == "GET" and "page=" in p]
    assert len(pages) == 2
    visible, _ = await c.list_forgejo_runners(ADMIN, visible=True)
    assert org_runner.id in {r.id for r in visible}
    # [inf] without ``page`` the whole set comes back, with X-Total-Count.
    raw = await c.call("GET", ADMIN.runners_path)
    assert len(raw.body) == 57 and raw.total == 57
    c.max_pages = 1
    assert (await c.list_runners(ADMIN)).complete is False


async def test_narrower_scopes_cannot_delete_wider_runners(forgejo, session):
    glob = await client(session, forgejo).register_runner(ADMIN, "global")
    alice = client(session, forgejo, forgejo.alice_token)
    assert (await alice.get_runner(ORG, glob.id)) is not None  # visible
    assert await alice.delete_runner(ORG, glob.id) is False  # not editable -> 404
    assert glob.id in forgejo.runners


async def test_mapped_jobs_name_their_repository_for_exact_accounting(forgejo, session):
    from gitea_runner_operator.reconcile.capacity.accounting import Claimant, assign, job_repository

    app = forgejo.add_job("acme", "app", ["docker"])
    lib = forgejo.add_job("acme", "lib", ["docker"])
    queued = (await client(session, forgejo).list_jobs(ADMIN)).items
    assert {j.id: job_repository(j) for j in queued} == {
        app.id: ("acme", "app"),
        lib.id: ("acme", "lib"),
    }
    org = Claimant("ns/org", Scope.ORG, "acme", None, frozenset({"docker"}), 0, 5)
    repo = Claimant("ns/repo", Scope.REPO, "acme", "app", frozenset({"docker"}), 0, 5)
    shares = assign(queued, [org, repo])
    assert [j.id for j in shares["ns/repo"]] == [app.id]  # the most specific group
    assert [j.id for j in shares["ns/org"]] == [lib.id]
    # One lookup per repository, across clients that share the cache (as the observer's do).
    names = RepoNames()
    for _ in range(3):
        await ForgejoClient(session, forgejo.url, forgejo.admin_token, repo_names=names).list_jobs(
            ADMIN
        )
    lookups = [p for _, p in forgejo.requests if p.startswith("/api/v1/repositories/")]
    assert len(lookups) == 2 + 2 and len(names) == 2  # the first client had its own cache


async def test_a_repository_name_past_gitea_s_grammar_is_neither_kept_nor_put_in_a_url(
    forgejo, session
):
    """A hostile Forgejo's ``full_name`` of 300 KiB would be remembered 4,096 times and put
    into every job's URL: it is refused, the job left unnamed, as one the token cannot see."""
    long = "b" * 300_000
    forgejo.add_repo("acme", long)
    named = forgejo.add_job("acme", "app", ["docker"])
    hostile = forgejo.add_job("acme", long, ["docker"])
    names = RepoNames()
    c = ForgejoClient(session, forgejo.url, forgejo.admin_token, attempts=1, repo_names=names)
    queued = {j.id: j for j in (await c.list_jobs(ADMIN)).items}
    assert queued[hostile.id].url == ""
    assert queued[named.id].url.endswith(f"/api/v1/repos/acme/app/actions/jobs/{named.id}")
    assert len(names) == 1
