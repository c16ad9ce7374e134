"""The operator's Forgejo path below the cluster: spec rules, the runner Job, detection
problems, bindings, and the enrollment of suspended runner Jobs against the fake Forgejo
(tests/support/fake_forgejo.py). The testbed suite runs the same path with a real API server."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import aiohttp
import pytest

from gitea_runner_operator.api.forge import FORGEJO_RUNNER_IMAGE, Flavor, ForgeInfo
from gitea_runner_operator.api.gitea import ActionJob, ActionRunner
from gitea_runner_operator.api.observation import Observation, Snapshot
from gitea_runner_operator.api.runnergroup import InvalidSpec, Scope, parse_spec
from gitea_runner_operator.forge.flavor import forge_problem
from gitea_runner_operator.forge.forgejo import ForgejoClient
from gitea_runner_operator.forge.scope import ScopeRef
from gitea_runner_operator.kube.runner_credentials import SecretExists
from gitea_runner_operator.objects.forgejo_job import (
    HANDLE_ANNOTATION,
    RUNNER_ID_ANNOTATION,
    render_forgejo_job,
)
from gitea_runner_operator.objects.views import job_view
from gitea_runner_operator.poll.enroll import Enroller
from gitea_runner_operator.poll.observer import GiteaHandle
from gitea_runner_operator.reconcile import forgejo
from gitea_runner_operator.reconcile.scaling import (
    ReapReason,
    RunnerState,
    find_orphans,
    runner_state,
    teardown,
)
from tests.support.builders import VALID
from tests.support.fake_cluster import FakeCache, FakeCluster, FakeCredentials
from tests.support.fake_forgejo import FakeForgejo

FORGEJO_SPEC = {
    **{k: v for k, v in VALID.items() if k != "registrationToken"},
    "scope": "org",
    "gitea": {"url": "https://forgejo.example.com", "flavor": "forgejo"},
    "labels": ["docker"],
}
FORGEJO_SPEC.pop("repo")
UID = "0f0e0d0c-uid"
JOB = "ci-" + "c8b4f2a1" + "-bcdfg"  # shape only; names are checked by their own tests


def spec(**changes: Any):
    raw = copy.deepcopy(FORGEJO_SPEC)
    raw.update(changes)
    return parse_spec(raw)


# -- spec ------------------------------------------------------------------------------------


def test_registration_token_is_optional_only_for_forgejo():
    assert spec().registration_token is None
    assert spec().gitea.flavor is Flavor.FORGEJO
    for flavor in ("auto", "gitea"):
        with pytest.raises(InvalidSpec, match=r"spec\.registrationToken: required unless"):
            spec(gitea={"url": "https://forgejo.example.com", "flavor": flavor})
    assert parse_spec(VALID).gitea.flavor is Flavor.AUTO
    with pytest.raises(InvalidSpec, match="flavor"):
        spec(gitea={"url": "https://forgejo.example.com", "flavor": "gogs"})


def test_crd_and_chart_carry_the_flavor_the_rule_and_status_forge():
    import yaml

    with open("manifests/crd.yaml") as fh:
        crd = yaml.safe_load(fh)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    gitea = schema["spec"]["properties"]["gitea"]["properties"]
    assert gitea["flavor"]["enum"] == ["auto", "gitea", "forgejo"]
    assert "registrationToken" not in schema["spec"]["required"]
    assert any("registrationToken" in r["rule"] for r in schema["spec"]["x-kubernetes-validations"])
    assert set(schema["status"]["properties"]["forge"]["properties"]) == {"flavor", "version"}


# -- detection problems ----------------------------------------------------------------------


def test_forgejo_older_than_15_is_refused_with_a_clear_reason():
    problem = forge_problem(ForgeInfo(Flavor.FORGEJO, "14.0.3+gitea-1.22.0"),
                            has_registration_token=False)  # fmt: skip
    assert problem is not None and problem.reason == "ForgejoUnsupported"
    assert "14.0.3" in problem.message and "registration API" in problem.message
    assert forge_problem(ForgeInfo(Flavor.FORGEJO, "15.0.3+gitea-1.22.0"),
                         has_registration_token=False) is None  # fmt: skip
    gitea = forge_problem(ForgeInfo(Flavor.GITEA, "1.27.3"), has_registration_token=False)
    assert gitea is not None and gitea.reason == "RegistrationTokenRequired"
    assert forge_problem(ForgeInfo(Flavor.GITEA, "1.27.3"), has_registration_token=True) is None


# -- the runner Job --------------------------------------------------------------------------


def render(**changes: Any) -> dict[str, Any]:
    return render_forgejo_job(
        group_name="ci",
        namespace="team-a",
        group_uid=UID,
        spec=spec(**changes),
        job_name=JOB,
        ttl_seconds_after_finished=600,
    )


def runner_of(job: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in job["spec"]["template"]["spec"]["containers"] if c["name"] == "runner")


def test_runner_job_starts_suspended_and_takes_credentials_only_by_reference():
    job = render()
    assert job["spec"]["suspend"] is True
    runner = runner_of(job)
    assert runner["image"] == FORGEJO_RUNNER_IMAGE
    env = {e["name"]: e for e in runner["env"]}
    assert not any(name.startswith("GITEA_RUNNER") for name in env)
    assert env["FORGEJO_RUNNER_UUID"]["valueFrom"]["secretKeyRef"] == {"name": JOB, "key": "uuid"}
    handle = env["FORGEJO_RUNNER_HANDLE"]["valueFrom"]["secretKeyRef"]
    assert handle == {"name": JOB, "key": "handle", "optional": True}
    assert env["FORGEJO_RUNNER_LABELS"]["value"] == "docker"
    volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    assert volumes["gro-runner-credentials"]["secret"]["secretName"] == JOB
    script = runner["command"][2]
    assert "one-job" in script and "--wait" in script and "--handle" in script
    assert "--token-url" in script and "--token " not in script
    # Nothing secret-looking travels by value: every value is a URL, a path or labels.
    values = [e["value"] for e in runner["env"] if "value" in e]
    assert all(len(v) < 40 or v.startswith("/") or "://" in v for v in values)


def test_rootless_without_an_image_runs_the_dind_sidecar_and_host_mode_has_no_register_step():
    pod = render(mode="dind-rootless")["spec"]["template"]["spec"]
    assert [c["name"] for c in pod.get("initContainers", [])] == ["dind"]
    # the default mode runs its own daemon sidecar, unprivileged, beside the Forgejo runner
    userns = render()["spec"]["template"]["spec"]
    assert [c["name"] for c in userns.get("initContainers", [])] == ["dockerd"]
    assert userns["hostUsers"] is False
    host = render(mode="host")["spec"]["template"]["spec"]
    assert "gro-register" not in [c["name"] for c in host.get("initContainers", [])]
    token = {"secretRef": {"name": "legacy", "key": "registration"}}
    legacy = render(mode="host", registrationToken=token)
    assert "initContainers" not in legacy["spec"]["template"]["spec"]
    assert "legacy" not in json.dumps(legacy)  # a Forgejo runner never gets that token
    assert runner_of(render(image="example.invalid/runner:1"))["image"] == (
        "example.invalid/runner:1"
    )


def test_the_one_job_script_passes_a_handle_only_when_there_is_one(tmp_path):
    import subprocess

    script = runner_of(render())["command"][2]
    fake = tmp_path / "forgejo-runner"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    fake.chmod(0o755)
    base = {"PATH": f"{tmp_path}:/usr/bin:/bin", "FORGEJO_URL": "https://f.test",
            "FORGEJO_RUNNER_UUID": "u", "FORGEJO_RUNNER_TOKEN_FILE": "/t",
            "FORGEJO_RUNNER_LABELS": "docker,amd64:host"}  # fmt: skip
    args = lambda env: subprocess.run(  # noqa: E731
        ["/bin/sh", "-c", script], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    bound = args({**base, "FORGEJO_RUNNER_HANDLE": "h-1"})
    assert bound[:8] == ["one-job", "--url", "https://f.test", "--uuid", "u",
                         "--token-url", "file:///t", "--wait"]  # fmt: skip
    assert bound[8:] == ["--label", "docker", "--label", "amd64:host", "--handle", "h-1"]
    assert "--handle" not in args(base)  # the fallback: one-job takes any job it fits


# -- decisions -------------------------------------------------------------------------------


def view(name: str, pods: tuple[str, ...] = (), *, finished: bool = False):
    meta = {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z", "annotations": {}}
    status = {"conditions": [{"type": "Complete", "status": "True"}]} if finished else {}
    pod_objs = [{"metadata": {"name": p}, "status": {"phase": "Running"}} for p in pods]
    return job_view({"metadata": meta, "status": status}, pod_objs)


def reg(id_: int, name: str, *, busy: bool = False, online: bool = True) -> ActionRunner:
    return ActionRunner(id=id_, name=name, status="online" if online else "offline", busy=busy,
                        ephemeral=True)  # fmt: skip


def test_a_registration_named_like_its_job_makes_the_runner_idle_or_busy():
    v = view(f"{JOB}", (f"{JOB}-xxxxx",))
    assert runner_state(v, {}) is RunnerState.STARTING
    assert runner_state(v, {JOB: reg(1, JOB)}) is RunnerState.IDLE
    assert runner_state(v, {JOB: reg(1, JOB, busy=True)}) is RunnerState.BUSY


def test_job_named_registrations_are_orphans_only_once_their_job_is_over():
    from gitea_runner_operator.api.naming import new_job_name

    name = new_job_name("ci", UID)
    runners = [reg(7, name, online=False)]
    assert find_orphans("ci", UID, [view(name)], runners) == []
    (orphan,) = find_orphans("ci", UID, [view(name, finished=True)], runners)
    assert orphan.runner_id == 7
    assert find_orphans("ci", UID, [], runners)[0].name == name
    down = teardown(group_name="ci", group_uid=UID, jobs=[],
                    observation=Observation((), tuple(runners)), drained=False)  # fmt: skip
    assert down.registrations == 1 and not down.done


def job(id_: int, handle: str, status: str = "queued") -> ActionJob:
    return ActionJob(id=id_, status=status, labels=("docker",), handle=handle)


def test_runners_bound_to_a_gone_handle_are_proposed_for_reaping():
    views = [view("a"), view("b"), view("c"), view("d")]
    handles = {"a": "h-waiting", "b": "h-running", "c": "h-gone", "d": "h-gone-busy"}
    states = {"a": RunnerState.IDLE, "b": RunnerState.IDLE, "c": RunnerState.IDLE,
              "d": RunnerState.BUSY}  # fmt: skip
    observation = Observation(
        queued=(job(1, "h-waiting"),),
        runners=(),
        in_progress=(job(2, "h-running", "in_progress"),),
    )
    (stale,) = forgejo.stale_bindings(views, handles, states, observation, {"c": (9,)})
    assert (stale.job_name, stale.reason, stale.runner_ids) == ("c", ReapReason.HANDLE_GONE, (9,))
    partial = Observation(queued=(), runners=(), runners_complete=False)
    assert forgejo.stale_bindings(views, handles, states, partial, {}) == []


def test_status_forge_shows_the_detection_or_keeps_the_last_known():
    assert forgejo.forge_status(ForgeInfo(Flavor.FORGEJO, "15.0.3+gitea-1.22.0"), {}) == {
        "flavor": "forgejo",
        "version": "15.0.3+gitea-1.22.0",
    }
    previous = {"forge": {"flavor": "gitea", "version": "1.27.3"}}
    assert forgejo.forge_status(None, previous) == previous["forge"]
    assert forgejo.forge_status(None, {}) is None


# -- enrollment ------------------------------------------------------------------------------


def cluster_of(*jobs: dict[str, Any], deleting: bool = False) -> FakeCluster:
    """The one fake cluster holding this group's runner Jobs."""
    cluster = FakeCluster()
    cluster.uid = UID
    cluster.put_jobs(*jobs)
    if deleting:
        cluster.deletion = "2026-01-01T00:00:00Z"
    return cluster


def suspended(name: str, created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    manifest = render()
    manifest["metadata"].update(name=name, uid=f"uid-{name}", creationTimestamp=created)
    return manifest


@pytest.fixture
async def fake_forgejo():
    fake = FakeForgejo()
    fake.token = fake.add_user("root", admin=True)
    fake.add_org("acme", owners=("root",))
    fake.add_repo("acme", "app")
    runner = await fake.start()
    yield fake
    await runner.cleanup()


async def observe(fake: FakeForgejo, session: aiohttp.ClientSession):
    client = ForgejoClient(session, fake.url, fake.token, attempts=1)
    scope = ScopeRef(Scope.ORG, "acme")
    queued, running = await client.list_active_jobs(scope)
    runners = await client.list_runners(scope)
    observation = Observation(queued.items, runners.items, in_progress=running.items,
                              forge=ForgeInfo(Flavor.FORGEJO, fake.version))  # fmt: skip
    return GiteaHandle(client, scope), Snapshot(0.0, "", observation=observation)


def decoded(secret: dict[str, Any]) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


async def test_each_suspended_job_gets_its_own_registration_and_a_distinct_job(fake_forgejo):
    older = fake_forgejo.add_job("acme", "app", ["docker"])
    newer = fake_forgejo.add_job("acme", "app", ["docker"])
    fake_forgejo.add_job("acme", "app", ["gpu"])  # not ours to take
    cluster = cluster_of(suspended("ci-a", "2026-01-01T00:00:01Z"),
                         suspended("ci-b", "2026-01-01T00:00:02Z"), suspended("ci-c"))  # fmt: skip
    creds = FakeCredentials(cluster)
    enroller = Enroller(cluster, FakeCache(cluster), creds)  # type: ignore[arg-type]
    async with aiohttp.ClientSession() as session:
        handle, snapshot = await observe(fake_forgejo, session)
        outcome = await enroller.run("team-a/ci", handle, snapshot, spec())
    # Oldest Job first gets the oldest job; two jobs, three runner Jobs: one stays suspended.
    assert outcome.enrolled == [("ci-c", older.handle), ("ci-a", newer.handle)]
    assert [j["spec"]["suspend"] for j in cluster.jobs.values()] == [False, True, False]
    assert sorted(name for _, name in fake_forgejo.registered) == ["ci-a", "ci-c"]
    for name, job_ in (("ci-c", older), ("ci-a", newer)):
        data = decoded(creds.secrets[name])
        runner = next(r for r in fake_forgejo.runners.values() if r.name == name)
        assert data == {"uuid": runner.uuid, "token": runner.token, "handle": job_.handle}
        assert runner.ephemeral
        owner = creds.secrets[name]["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", name, f"uid-{name}")
        annotations = cluster.jobs[name]["metadata"]["annotations"]
        assert annotations[HANDLE_ANNOTATION] == job_.handle
        assert annotations[RUNNER_ID_ANNOTATION] == str(runner.id)
    # The token never reaches a log line, an annotation or the Job: only the Secret.
    assert not any(r.token in json.dumps(cluster.jobs) for r in fake_forgejo.runners.values())
    # A second pass (a slow watch) registers nothing twice.
    async with aiohttp.ClientSession() as session:
        handle, snapshot = await observe(fake_forgejo, session)
        again = await enroller.run("team-a/ci", handle, snapshot, spec())
    assert again.enrolled == [] and len(fake_forgejo.registered) == 2


async def test_a_failed_secret_removes_the_registration_and_a_cut_off_enrollment_is_dropped(
    fake_forgejo,
):
    fake_forgejo.add_job("acme", "app", ["docker"])
    cluster = cluster_of(suspended("ci-a"))
    creds = FakeCredentials(cluster, fail=SecretExists("ci-a"))
    enroller = Enroller(cluster, FakeCache(cluster), creds)  # type: ignore[arg-type]
    async with aiohttp.ClientSession() as session:
        handle, snapshot = await observe(fake_forgejo, session)
        await enroller.run("team-a/ci", handle, snapshot, spec())
    assert fake_forgejo.runners == {} and cluster.deleted == ["ci-a"]
    # A Job that carries a registration id but is still suspended lost its token: both go.
    leftover = suspended("ci-b")
    async with aiohttp.ClientSession() as session:
        client = ForgejoClient(session, fake_forgejo.url, fake_forgejo.token, attempts=1)
        earlier = await client.register_runner(ScopeRef(Scope.ORG, "acme"), "ci-b")
        leftover["metadata"]["annotations"][RUNNER_ID_ANNOTATION] = str(earlier.id)
        cluster.put_jobs(leftover)
        handle, snapshot = await observe(fake_forgejo, session)
        outcome = await enroller.run("team-a/ci", handle, snapshot, spec())
    assert outcome.abandoned == ["ci-b"] and earlier.id not in fake_forgejo.runners
    assert cluster.deleted == ["ci-a", "ci-b"]


async def test_a_registration_whose_answer_was_lost_is_removed_before_registering_again(
    fake_forgejo,
):
    job_ = fake_forgejo.add_job("acme", "app", ["docker"])
    cluster = cluster_of(suspended("ci-a"))
    creds = FakeCredentials(cluster)
    enroller = Enroller(cluster, FakeCache(cluster), creds)  # type: ignore[arg-type]
    async with aiohttp.ClientSession() as session:
        client = ForgejoClient(session, fake_forgejo.url, fake_forgejo.token, attempts=1)
        # Forgejo made it; the answer (the only copy of its token) never came back.
        lost = await client.register_runner(ScopeRef(Scope.ORG, "acme"), "ci-a")
        handle, snapshot = await observe(fake_forgejo, session)
        outcome = await enroller.run("team-a/ci", handle, snapshot, spec())
    assert outcome.enrolled == [("ci-a", job_.handle)]
    assert lost.id not in fake_forgejo.runners  # not leaked
    (kept,) = fake_forgejo.runners.values()
    assert decoded(creds.secrets["ci-a"])["uuid"] == kept.uuid


async def test_no_runner_is_enrolled_while_the_group_is_torn_down(fake_forgejo):
    fake_forgejo.add_job("acme", "app", ["docker"])
    cluster = cluster_of(suspended("ci-a"), deleting=True)
    enroller = Enroller(cluster, FakeCache(cluster), FakeCredentials(cluster))  # type: ignore[arg-type]
    async with aiohttp.ClientSession() as session:
        handle, snapshot = await observe(fake_forgejo, session)
        assert (await enroller.run("team-a/ci", handle, snapshot, spec())).enrolled == []
    assert fake_forgejo.registered == []


async def test_warm_runners_are_enrolled_unbound(fake_forgejo):
    cluster = cluster_of(suspended("ci-a"))
    creds = FakeCredentials(cluster)
    enroller = Enroller(cluster, FakeCache(cluster), creds)  # type: ignore[arg-type]
    async with aiohttp.ClientSession() as session:
        handle, snapshot = await observe(fake_forgejo, session)
        cold = await enroller.run("team-a/ci", handle, snapshot, spec())
        warm = await enroller.run("team-a/ci", handle, snapshot, spec(minIdleRunners=1))
    assert cold.enrolled == [] and warm.enrolled == [("ci-a", "")]
    assert "handle" not in decoded(creds.secrets["ci-a"])


# -- the observer ----------------------------------------------------------------------------


class TokenSecrets:
    def __init__(self, token: str) -> None:
        self.token = token
        self.read_fields: list[str] = []

    async def read(self, namespace: str, name: str, key: str, field: str, url: str) -> str:
        self.read_fields.append(field)
        return self.token

    def invalidate(self, namespace: str, name: str) -> None:
        pass


@pytest.mark.parametrize("flavor", ["auto", "forgejo"])
async def test_the_observer_detects_forgejo_and_maps_its_queue(fake_forgejo, flavor):
    from gitea_runner_operator.forge.client import SessionPool
    from gitea_runner_operator.poll.observer import Observer

    queued = fake_forgejo.add_job("acme", "app", ["docker"])
    fake_forgejo.add_job("acme", "app", ["docker"], status="running")
    secrets = TokenSecrets(fake_forgejo.token)
    pool = SessionPool()
    try:
        observer = Observer(secrets, pool)  # type: ignore[arg-type]
        raw = {**FORGEJO_SPEC, "gitea": {"url": fake_forgejo.url, "flavor": flavor}}
        if flavor == "auto":
            raw["registrationToken"] = VALID["registrationToken"]
        snapshot, handle = await observer.observe("team-a", parse_spec(raw))
    finally:
        await pool.close()
    assert snapshot.problem is None and snapshot.observation is not None
    assert snapshot.observation.forge == ForgeInfo(Flavor.FORGEJO, "15.0.3+gitea-1.22.0")
    assert [j.handle for j in snapshot.observation.queued] == [queued.handle]
    assert len(snapshot.observation.in_progress) == 1
    assert handle is not None and handle.forgejo is not None
    expected = ["spec.authToken"] + (["spec.registrationToken"] if flavor == "auto" else [])
    assert secrets.read_fields == expected


async def test_the_observer_refuses_forgejo_14(fake_forgejo):
    from gitea_runner_operator.forge.client import SessionPool
    from gitea_runner_operator.poll.observer import Observer

    fake_forgejo.version = "14.0.3+gitea-1.22.0"
    pool = SessionPool()
    try:
        observer = Observer(TokenSecrets(fake_forgejo.token), pool)  # type: ignore[arg-type]
        raw = {**FORGEJO_SPEC, "gitea": {"url": fake_forgejo.url}}
        raw["registrationToken"] = VALID["registrationToken"]
        snapshot, handle = await observer.observe("team-a", parse_spec(raw))
    finally:
        await pool.close()
    assert handle is None and snapshot.problem is not None
    assert snapshot.problem.reason == "ForgejoUnsupported"
    assert not any("/actions/" in path for _, path in fake_forgejo.requests)


def test_suspended_jobs_beyond_the_queue_are_dropped_youngest_first_and_never_reported_stuck():
    from gitea_runner_operator.reconcile.scaling import start_failure

    def suspended_view(name: str, created: str) -> Any:
        raw = {"metadata": {"name": name, "creationTimestamp": created}, "spec": {"suspend": True}}
        return job_view(raw, [])

    old, young = (
        suspended_view("a", "2026-01-01T00:00:00Z"),
        suspended_view("b", "2026-01-01T00:01:00Z"),
    )
    assert old.suspended and start_failure(old, now=old.created_at + 3600) is None
    states = {"a": RunnerState.STARTING, "b": RunnerState.STARTING}
    (drop,) = forgejo.surplus_suspended([old, young], states, demand=1, not_busy=2, min_idle=0)
    assert drop.job_name == "b" and drop.reason is ReapReason.HANDLE_GONE
    assert forgejo.surplus_suspended([old, young], states, demand=1, not_busy=2, min_idle=1) == []
    # The Job controller's condition stands in when a cache keeps no spec.
    raw = {
        "metadata": {"name": "c"},
        "status": {"conditions": [{"type": "Suspended", "status": "True"}]},
    }
    assert job_view(raw, []).suspended
