"""What a runner does against the real Gitea: the behaviour the operator's Jobs, reaper and
README rely on. Each test records one fact, recorded from the official Gitea Runner (README,
"What the official runner does"); the testbed's runner follows v1.0.8's record, and any runner
binary given by ``GRO_TESTBED_RUNNER_BIN`` is held to the record of the release it reports
(:class:`tests.testbed.runners.Behaviour`: releases differ on unknown label schemas and on a
busy runner's SIGTERM). If a release changes a fact, this file says which assumption broke.

They run the runner as the image's entrypoint would (``register``, then ``daemon``), as host
processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.testbed import wait_until
from tests.testbed.gitea_api import GiteaAPI
from tests.testbed.runners import RunnerBinary

pytestmark = pytest.mark.e2e

# What the harness uses too: no cache server, quick polling. shutdown_timeout is the default.
CONFIG = """\
log: {level: info}
runner: {file: .runner, capacity: 1, timeout: 10m, fetch_interval: 1s, fetch_interval_max: 2s}
cache: {enabled: false}
"""


class Runner:
    """One runner in its own directory, driven as the image's entrypoint drives it."""

    def __init__(self, exe: Path, cwd: Path, url: str, token: str, label: str) -> None:
        self.exe, self.cwd, self.url, self.token = exe, cwd, url, token
        self.name = f"contract-{uuid.uuid4().hex[:8]}"
        self.labels = f"{label}:host"
        self.proc: subprocess.Popen[bytes] | None = None
        cwd.mkdir(parents=True, exist_ok=True)
        (cwd / "config.yaml").write_text(CONFIG)

    def register(self, *extra: str, labels: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.exe), "register", "--no-interactive", "--instance", self.url,
             "--token", self.token, "--name", self.name, "--labels", labels or self.labels,
             "--config", "config.yaml", *extra],
            cwd=self.cwd, capture_output=True, text=True, timeout=60,
            env={**os.environ, "HOME": str(self.cwd)},
        )  # fmt: skip

    def daemon(self, config: str = CONFIG) -> subprocess.Popen[bytes]:
        (self.cwd / "config.yaml").write_text(config)
        with open(self.cwd / "daemon.log", "ab") as log:
            self.proc = subprocess.Popen(
                [str(self.exe), "daemon", "--config", "config.yaml"],
                cwd=self.cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, "HOME": str(self.cwd)}, start_new_session=True,
            )  # fmt: skip
        return self.proc

    def log(self) -> str:
        return (self.cwd / "daemon.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


@pytest.fixture
def real_runner(runner_binary: RunnerBinary) -> Path:
    return runner_binary.path


@pytest.fixture
def org_repo(gitea: GiteaAPI) -> Iterator[tuple[str, str]]:
    org = f"contract-{uuid.uuid4().hex[:8]}"
    gitea.create_org(org)
    gitea.create_repo(org, "app")
    yield org, "app"
    with contextlib.suppress(Exception):
        gitea.delete(f"/repos/{org}/app")
    with contextlib.suppress(Exception):
        gitea.delete(f"/orgs/{org}")


@pytest.fixture
def make_runner(
    real_runner: Path, gitea: GiteaAPI, testbed: Any, org_repo: tuple[str, str], tmp_path: Path
) -> Iterator[Any]:
    made: list[Runner] = []

    def make(label: str) -> Runner:
        token = gitea.registration_token("org", owner=org_repo[0])
        r = Runner(real_runner, tmp_path / f"r{len(made)}", testbed.gitea_url, token, label)
        made.append(r)
        return r

    yield make
    for r in made:
        r.stop()


def workflow(label: str, run: str) -> str:
    return (
        f"name: c\non: [push]\njobs:\n  j:\n    runs-on: {label}\n    steps:\n      - run: {run}\n"
    )


def runners_of(gitea: GiteaAPI, org: str) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in gitea.list_runners("org", owner=org)}


def the_job(gitea: GiteaAPI, org: str, repo: str) -> dict[str, Any]:
    (job,) = gitea.list_jobs("repo", org, repo, status=None)
    return job


def test_ephemeral_register_writes_runner_file_runs_one_job_exits_0_and_is_removed(
    gitea, org_repo, make_runner
):
    org, repo = org_repo
    label = f"gro-c-{uuid.uuid4().hex[:6]}"
    r = make_runner(label)
    reg = r.register("--ephemeral")
    assert reg.returncode == 0, reg.stdout + reg.stderr
    # the image's entrypoint decides success by this line, not by the exit code.
    assert "Runner registered successfully" in reg.stdout + reg.stderr
    state = json.loads((r.cwd / ".runner").read_text())
    assert set(state) == {"WARNING", "id", "uuid", "name", "token", "address", "labels",
                          "ephemeral"}  # fmt: skip
    assert (state["name"], state["labels"], state["ephemeral"]) == (r.name, [r.labels], True)
    seen = runners_of(gitea, org)[r.name]
    # Gitea gets the label *names* only; the schema stays with the runner.
    assert [lbl["name"] for lbl in seen["labels"]] == [label]
    assert seen["ephemeral"] is True

    gitea.push_workflow(org, repo, "c.yml", workflow(label, 'test -n "$GITHUB_SHA" && sleep 6'))
    proc = r.daemon()
    busy = wait_until(lambda: runners_of(gitea, org).get(r.name, {}).get("busy"), 60, "busy")
    assert busy is True
    assert proc.wait(timeout=120) == 0, r.log()
    job = the_job(gitea, org, repo)
    assert (job["status"], job["conclusion"]) == ("completed", "success")
    assert r.name not in runners_of(gitea, org)  # Gitea removed the ephemeral registration
    assert "declare successfully" in r.log()


def test_a_failed_job_is_reported_as_failure_and_the_runner_still_exits_0(
    gitea, org_repo, make_runner
):
    """The Pod succeeds whatever the job's result: the Job's status says nothing about CI."""
    org, repo = org_repo
    label = f"gro-c-{uuid.uuid4().hex[:6]}"
    r = make_runner(label)
    assert r.register("--ephemeral").returncode == 0
    gitea.push_workflow(org, repo, "c.yml", workflow(label, "exit 3"))
    assert r.daemon().wait(timeout=120) == 0, r.log()
    job = the_job(gitea, org, repo)
    assert (job["status"], job["conclusion"]) == ("completed", "failure")


def test_sigterm_while_idle_exits_0_at_once_and_leaves_the_registration(
    gitea, org_repo, make_runner
):
    org, _ = org_repo
    r = make_runner(f"gro-c-{uuid.uuid4().hex[:6]}")
    assert r.register("--ephemeral").returncode == 0
    proc = r.daemon()
    wait_until(lambda: "declare successfully" in r.log(), 30, "daemon up")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, r.log()
    assert "shutdown initiated" in r.log()
    # An idle ephemeral runner that was stopped stays registered: the operator deletes it.
    assert r.name in runners_of(gitea, org)


def test_sigterm_while_busy_does_not_stop_the_running_step_even_with_no_shutdown_timeout(
    gitea, org_repo, make_runner, runner_binary
):
    """v1.x: shutdown_timeout defaults to 0s, and the runner then logs that it "cancelled in
    progress jobs", yet a running host step goes on: the runner exits only once the job has
    ended, with the job's real result. In a Pod, the kubelet's SIGKILL after
    terminationGracePeriodSeconds is what stops such a job (docs/development.md, "What the
    official runner does"). Later releases stop the job sooner; what the operator relies on
    holds for both: the runner exits 0 and Gitea ends the job."""
    org, repo = org_repo
    label = f"gro-c-{uuid.uuid4().hex[:6]}"
    r = make_runner(label)
    assert r.register("--ephemeral").returncode == 0
    gitea.push_workflow(org, repo, "c.yml", workflow(label, "echo started && sleep 20"))
    proc = r.daemon()
    wait_until(lambda: runners_of(gitea, org).get(r.name, {}).get("busy"), 60, "busy")
    proc.send_signal(signal.SIGTERM)  # to the runner only, as tini (PID 1) forwards it
    if not runner_binary.behaviour.busy_step_outlives_sigterm:
        assert proc.wait(timeout=120) == 0, r.log()
        wait_until(lambda: the_job(gitea, org, repo)["status"] == "completed", 90, "ended")
        return
    wait_until(lambda: "shutdown initiated" in r.log(), 30, "shutdown begins")
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=5)  # still running the step
    assert proc.wait(timeout=120) == 0, r.log()
    assert "cancelled in progress jobs during shutdown" in r.log()
    job = the_job(gitea, org, repo)
    assert (job["status"], job["conclusion"]) == ("completed", "success")


def test_sigterm_while_busy_lets_the_job_finish_within_shutdown_timeout(
    gitea, org_repo, make_runner
):
    """The documented way to let a job finish (shutdown_timeout plus a longer grace period)."""
    org, repo = org_repo
    label = f"gro-c-{uuid.uuid4().hex[:6]}"
    r = make_runner(label)
    assert r.register("--ephemeral").returncode == 0
    gitea.push_workflow(org, repo, "c.yml", workflow(label, "sleep 8"))
    proc = r.daemon(
        CONFIG.replace("fetch_interval: 1s", "fetch_interval: 1s, shutdown_timeout: 60s")
    )
    wait_until(lambda: runners_of(gitea, org).get(r.name, {}).get("busy"), 60, "busy")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=90) == 0, r.log()
    job = the_job(gitea, org, repo)
    assert (job["status"], job["conclusion"]) == ("completed", "success")


def test_a_runner_whose_registration_is_deleted_keeps_running(gitea, org_repo, make_runner):
    """Deleting the registration does not stop the process: whoever removes a runner must
    also delete its Pod (the operator's reaper deletes the Job first, then the registration)."""
    org, _ = org_repo
    r = make_runner(f"gro-c-{uuid.uuid4().hex[:6]}")
    assert r.register("--ephemeral").returncode == 0
    proc = r.daemon()
    wait_until(lambda: "declare successfully" in r.log(), 30, "daemon up")
    gitea.delete_runner(runners_of(gitea, org)[r.name]["id"], "org", owner=org)
    wait_until(lambda: "failed to fetch task" in r.log(), 30, "fetch errors")
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=8)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


@pytest.mark.parametrize("labels", ["app:infra", "k8s:kubernetes://busybox"])
def test_register_refuses_a_label_with_an_unknown_schema(
    gitea, org_repo, make_runner, labels, runner_binary
):
    """v1.x refuses it (why the operator refuses such labels: the CRD's CEL rule and
    InvalidSpec); from v2.1 the runner registers it as a host label instead."""
    r = make_runner("unused")
    reg = r.register("--ephemeral", labels=labels)
    if not runner_binary.behaviour.refuses_unknown_schema:
        assert reg.returncode == 0, reg.stdout + reg.stderr
        assert r.name in runners_of(gitea, org_repo[0])
        return
    assert reg.returncode == 1
    assert "unsupported schema" in reg.stdout + reg.stderr
    assert r.name not in runners_of(gitea, org_repo[0])


def test_register_with_a_wrong_token_exits_1_and_daemon_without_registration_exits_1(
    make_runner,
):
    r = make_runner(f"gro-c-{uuid.uuid4().hex[:6]}")
    r.token = "0" * 40
    reg = r.register("--ephemeral")
    assert reg.returncode == 1, reg.stdout + reg.stderr
    assert "Runner registered successfully" not in reg.stdout + reg.stderr
    assert not (r.cwd / ".runner").exists()
    proc = r.daemon()
    assert proc.wait(timeout=30) == 1
    assert "registration file not found" in r.log()


def test_runner_labels_in_the_config_file_win_over_the_labels_given(gitea, org_repo, make_runner):
    """Why the operator refuses a runnerConfig with runner.labels (RunnerConfigInvalid)."""
    r = make_runner(f"gro-c-{uuid.uuid4().hex[:6]}")
    config = CONFIG.replace("runner: {", "runner: {labels: ['from-config:host'], ")
    (r.cwd / "config.yaml").write_text(config)
    reg = r.register("--ephemeral")
    assert reg.returncode == 0, reg.stdout + reg.stderr
    assert "Labels from command will be ignored" in reg.stdout + reg.stderr
    seen = runners_of(gitea, org_repo[0])[r.name]
    assert [lbl["name"] for lbl in seen["labels"]] == ["from-config"]
