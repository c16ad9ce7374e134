"""The operator's Forgejo path on the testbed: a real API server, controller-manager (the Job
controller, the garbage collector), kwok running the runner Pods, and the operator as a
process, against the fake Forgejo of tests/support/fake_forgejo.py (a real Forgejo cannot be built
here; the fake follows the Forgejo 15 reference). The test plays each runner Pod's
forgejo-runner over the fake's runner RPC, with the credentials the operator put in that
runner's Secret: the only way those credentials could reach it."""

from __future__ import annotations

import base64
import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import manifests
from tests.support.fake_forgejo import FakeForgejo, Job
from tests.support.testbed import (
    GROUPS,
    condition,
    group_status,
    kwok_image,
    make_secret,
    ready,
    runner_jobs,
    sample,
    wait_until,
)

pytestmark = pytest.mark.integration

ORG = "acme"


@pytest.fixture
def forgejo() -> Iterator[FakeForgejo]:
    fake = FakeForgejo()
    fake.admin_token = fake.add_user("root", admin=True)  # type: ignore[attr-defined]
    fake.add_user("alice")
    fake.add_org(ORG, owners=("root",))
    fake.add_repo(ORG, "app")
    fake.add_repo("root", "tools")
    fake.add_repo("alice", "notes")
    with fake.in_thread():
        yield fake


def forgejo_group(name: str, url: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "scope": "org",
        "org": ORG,
        "gitea": {"url": url, "flavor": "forgejo"},
        "labels": ["gro-linux"],
        "maxActiveRunners": 3,
        "authToken": {"secretRef": {"name": "tokens", "key": "api"}},
        "pollInterval": "5s",
        "image": kwok_image(600),
    }
    body.update(spec)
    return {
        "apiVersion": "gitea.bpg.pw/v1alpha1",
        "kind": "RunnerGroup",
        "metadata": {"name": name},
        "spec": body,
    }


def started(kube: Any, ns: str, group: str) -> list[dict[str, Any]]:
    """Runner Jobs the operator let start (no longer suspended)."""
    jobs = runner_jobs(kube, ns, group)
    return [j for j in jobs if not j["spec"].get("suspend") and not j["metadata"].get(
        "deletionTimestamp")]  # fmt: skip


def credentials(kube: Any, ns: str, job_name: str) -> dict[str, str]:
    secret = kube.get(f"/api/v1/namespaces/{ns}/secrets/{job_name}")
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


class Runner:
    """What forgejo-runner one-job does in a runner Pod, with that Pod's credentials."""

    def __init__(self, fake: FakeForgejo, creds: dict[str, str], labels: list[str]) -> None:
        self.fake, self.creds, self.labels = fake, creds, labels
        self.task: dict[str, Any] | None = None

    def rpc(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self.fake.url}/api/actions/runner.v1.RunnerService/{method}",
            data=json.dumps(body).encode(),
            headers={"x-runner-uuid": self.creds["uuid"], "x-runner-token": self.creds["token"],
                     "Content-Type": "application/json"},
            method="POST",
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=5) as resp:
            return json.loads(resp.read())  # type: ignore[no-any-return]

    def take(self) -> dict[str, Any] | None:
        self.rpc("Declare", {"version": "v12.13.2", "labels": self.labels})
        answer = self.rpc(
            "FetchSingleTask", {"tasksVersion": 0, "handle": self.creds.get("handle", "")}
        )
        self.task = answer.get("task")
        if self.task is not None:
            self.rpc("UpdateLog", {})  # reports: Forgejo shows the runner active
        return self.task

    def finish(self) -> None:
        assert self.task is not None
        self.rpc("UpdateTask", {"state": {"id": int(self.task["id"]), "result": "RESULT_SUCCESS"}})


def runner_for(kube: Any, ns: str, job: dict[str, Any], fake: FakeForgejo) -> Runner:
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    labels = [lbl.split(":", 1)[0] for lbl in env["FORGEJO_RUNNER_LABELS"]["value"].split(",")]
    return Runner(fake, credentials(kube, ns, job["metadata"]["name"]), labels)


def setup_namespace(kube: Any, ns: str, fake: FakeForgejo) -> None:
    make_secret(kube, ns, "tokens", {"api": fake.admin_token})  # type: ignore[attr-defined]


def ours(fake: FakeForgejo, prefix: str) -> tuple[set[int], set[int]]:
    """(registrations the operator made for the group, those still registered)."""
    with fake.lock:
        made = {rid for rid, name in fake.registered if name.startswith(prefix)}
        return made, made & set(fake.runners)


def test_one_runner_per_waiting_job_with_its_own_credentials_bound_by_handle(
    kube, cluster, team_namespace, forgejo, start_operator, kwok
):
    ns = team_namespace
    setup_namespace(kube, ns, forgejo)
    first = forgejo.add_job(ORG, "app", ["gro-linux"])
    second = forgejo.add_job(ORG, "app", ["gro-linux"])
    forgejo.add_job(ORG, "app", ["gro-gpu"])  # labels the group does not offer
    forgejo.add_job(ORG, "app", ["gro-linux"], status="blocked")  # needs: not demand
    start_operator(ns)
    manifests.apply(kube, forgejo_group("ci", forgejo.url), namespace=ns)

    jobs = wait_until(lambda: len(s := started(kube, ns, "ci")) == 2 and s, what="two runners")
    assert max(sample(10, lambda: len(runner_jobs(kube, ns, "ci")))) == 2

    handles = set()
    for job in jobs:
        name = job["metadata"]["name"]
        creds = credentials(kube, ns, name)
        registration = next(r for r in forgejo.runners.values() if r.uuid == creds["uuid"])
        assert registration.name == name and registration.ephemeral
        assert creds["token"] == registration.token
        handles.add(creds["handle"])
        # The token reaches the Pod only through the Secret: never the Job, never its status.
        job_now = kube.get(f"/apis/batch/v1/namespaces/{ns}/jobs/{name}")
        assert creds["token"] not in json.dumps(job_now)
        secret = kube.get(f"/api/v1/namespaces/{ns}/secrets/{name}")
        (owner,) = secret["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"]) == ("Job", job_now["metadata"]["uid"])
    assert handles == {first.handle, second.handle}

    status = wait_until(lambda: (s := group_status(kube, ns, "ci")).get("forge") and s,
                        what="status.forge")  # fmt: skip
    assert status["forge"] == {"flavor": "forgejo", "version": forgejo.version}
    assert ready(status)["status"] == "True"
    assert not any(m == "POST" and "/hooks" in p for m, p in forgejo.requests)

    # Each runner takes exactly the job it was made for.
    runners = [runner_for(kube, ns, job, forgejo) for job in jobs]
    taken = {r.take()["handle"] for r in runners}  # type: ignore[index]
    assert taken == {first.handle, second.handle}
    for runner in runners:
        runner.finish()  # Forgejo removes a used ephemeral runner itself
    assert max(sample(8, lambda: len(started(kube, ns, "ci")))) == 2  # nothing new
    log = json.dumps(kube.get(f"/api/v1/namespaces/{ns}/events"))
    assert not any(r.creds["token"] in log for r in runners)


def test_a_gone_handle_ends_the_runner_and_its_registration(
    kube, cluster, team_namespace, forgejo, start_operator, kwok
):
    ns = team_namespace
    setup_namespace(kube, ns, forgejo)
    job: Job = forgejo.add_job(ORG, "app", ["gro-linux"])
    start_operator(ns)
    manifests.apply(kube, forgejo_group("ci", forgejo.url), namespace=ns)
    (runner_job,) = wait_until(lambda: started(kube, ns, "ci"), what="a runner")
    name = runner_job["metadata"]["name"]
    runner_id = next(r.id for r in forgejo.runners.values() if r.name == name)

    forgejo.cancel(job.id)  # cancelled before any runner took it: its handle names nothing
    wait_until(lambda: not started(kube, ns, "ci"), timeout=60, what="the runner Job reaped")
    wait_until(lambda: runner_id not in forgejo.runners, what="its registration deleted")
    assert (runner_id, name, "offline") in forgejo.deleted_runners
    # The Event follows the deletions (the reaper writes it last).
    wait_until(
        lambda: any(
            e["reason"] == "RunnerReaped" and "no queued Forgejo job left" in e["message"]
            for e in kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
        ),
        timeout=20,
        what="a RunnerReaped Event saying why",
    )


SCOPES: dict[str, dict[str, str]] = {
    "global": {"scope": "global"},
    "org": {"scope": "org", "org": ORG},
    "repo": {"scope": "repo", "org": ORG, "repo": "app"},
    "user": {"scope": "org", "org": "root"},  # the token's own user: Forgejo's /user routes
}


@pytest.mark.parametrize("scope", sorted(SCOPES))
def test_every_scope_serves_its_own_jobs_and_teardown_removes_every_registration(
    kube, cluster, team_namespace, forgejo, start_operator, kwok, scope
):
    ns = team_namespace
    setup_namespace(kube, ns, forgejo)
    app = forgejo.add_job(ORG, "app", ["gro-linux"])
    tools = forgejo.add_job("root", "tools", ["gro-linux"])
    notes = forgejo.add_job("alice", "notes", ["gro-linux"])
    expected = {
        "global": {app.handle, tools.handle, notes.handle},
        "org": {app.handle},
        "repo": {app.handle},
        "user": {tools.handle},
    }[scope]
    group = forgejo_group("ci", forgejo.url)
    group["spec"].pop("org")
    group["spec"].update(SCOPES[scope])
    start_operator(ns)
    manifests.apply(kube, group, namespace=ns)

    wait_until(lambda: len(started(kube, ns, "ci")) == len(expected), what="one runner per job")
    assert max(sample(6, lambda: len(runner_jobs(kube, ns, "ci")))) == len(expected)
    bound = {credentials(kube, ns, j["metadata"]["name"]).get("handle")
             for j in started(kube, ns, "ci")}  # fmt: skip
    assert bound == expected
    made, _ = ours(forgejo, "ci-")
    assert len(made) == len(expected)

    path = f"{GROUPS.format(ns=ns)}/ci"
    kube.delete(path)
    wait_until(lambda: _gone(kube, path), timeout=90, what="the group deleted")
    made, left = ours(forgejo, "ci-")
    assert made and not left, f"registrations left behind: {left}"


def _gone(kube: Any, path: str) -> bool:
    try:
        kube.get(path)
    except Exception:
        return True
    return False


def test_forgejo_older_than_15_is_refused(kube, cluster, team_namespace, forgejo, start_operator):
    ns = team_namespace
    setup_namespace(kube, ns, forgejo)
    forgejo.version = "14.0.3+gitea-1.22.0"
    forgejo.add_job(ORG, "app", ["gro-linux"])
    start_operator(ns)
    group = forgejo_group("old", forgejo.url)
    group["spec"]["gitea"]["flavor"] = "auto"
    group["spec"]["registrationToken"] = {"secretRef": {"name": "tokens", "key": "api"}}
    manifests.apply(kube, group, namespace=ns)
    status = wait_until(
        lambda: (
            (s := group_status(kube, ns, "old"))
            and ready(s).get("reason") == "ForgejoUnsupported"
            and s
        ),
        what="ForgejoUnsupported",
    )
    assert "14.0.3" in ready(status)["message"]
    assert runner_jobs(kube, ns, "old") == [] and forgejo.registered == []


def test_a_managed_hook_is_never_created_on_forgejo(
    kube, cluster, team_namespace, forgejo, start_operator
):
    ns = team_namespace
    setup_namespace(kube, ns, forgejo)
    make_secret(kube, ns, "hook", {"secret": "x" * 32})
    start_operator(ns)
    group = forgejo_group("hooked", forgejo.url)
    group["spec"]["webhook"] = {"secretRef": {"name": "hook", "key": "secret"}, "manageHook": True}
    manifests.apply(kube, group, namespace=ns)
    status = wait_until(
        lambda: (
            condition(group_status(kube, ns, "hooked"), "Webhook").get("reason")
            == "ForgejoHasNoJobEvents"
            and group_status(kube, ns, "hooked")
        ),
        what="Webhook=False ForgejoHasNoJobEvents",
    )
    assert condition(status, "Webhook")["status"] == "False"
    assert not any("/hooks" in p for _, p in forgejo.requests)
