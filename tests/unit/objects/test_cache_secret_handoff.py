"""The cache's secret never reaches job code (issue 24): the runner Pod of a cache group
mounts the config Secret only into the operator's init containers, and hands the runner
its config once through a FIFO that is gone before the runner takes a job.

The real node shows the whole story (tests/real_node/test_real_node_cache_secret.py):
a job in each mode tries the file, ``/proc`` and ``docker run -v``, and fails."""

from __future__ import annotations

import os
import select
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from gitea_runner_operator.api.runner_config import registers_in_init, runner_config_problem
from gitea_runner_operator.api.runnergroup import InvalidSpec, RunnerMode, parse_spec
from gitea_runner_operator.objects import config_handoff
from gitea_runner_operator.objects.forgejo_job import render_forgejo_job
from gitea_runner_operator.objects.job_template import CONFIG_DIR, render_runner_job
from tests.support.builders import VALID

MODES = ("host", "dind", "dind-rootless")
OWNED = {"group_name": "ci", "namespace": "team-a", "group_uid": "u1", "job_name": "ci-abc-1"}
SECRET_VOLUME = "gro-runner-config"


def cache_spec(mode: str, **more: Any) -> Any:
    labels = ["linux"] if mode == "host" else ["linux:docker://node:20"]
    return parse_spec({**VALID, "mode": mode, "labels": labels, "cache": {"enabled": True}, **more})


def pod_of(spec: Any) -> dict[str, Any]:
    return render_runner_job(spec=spec, **OWNED)["spec"]["template"]["spec"]


def containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in [*pod.get("initContainers", []), *pod["containers"]]}


def mounting(pod: dict[str, Any], volume: str) -> set[str]:
    return {
        name
        for name, c in containers(pod).items()
        if any(m["name"] == volume for m in c.get("volumeMounts", []))
    }


@pytest.mark.parametrize("mode", MODES)
def test_only_the_operators_init_containers_mount_the_config_secret(mode):
    sidecar = {"name": "proxy", "image": "proxy:1", "restartPolicy": "Always"}
    template = {"spec": {"initContainers": [sidecar], "containers": [{"name": "runner"}]}}
    pod = pod_of(cache_spec(mode, template=template))
    assert mounting(pod, SECRET_VOLUME) == {"gro-register", "gro-config"}
    init = [c["name"] for c in pod["initContainers"]]
    # registration first (it reads the config too), then the hand-off, then the runner
    assert init.index("gro-register") < init.index("gro-config")
    assert containers(pod)["gro-config"]["restartPolicy"] == "Always"
    runner = containers(pod)["runner"]
    at_config = [m for m in runner["volumeMounts"] if m["mountPath"] == CONFIG_DIR]
    assert at_config == [{"name": "gro-config-handoff", "mountPath": CONFIG_DIR, "readOnly": True}]
    # the runner registers in gro-register: the token is not in the runner container either
    names = {e["name"] for e in runner["env"]}
    assert "GITEA_RUNNER_REGISTRATION_TOKEN" not in names
    volumes = {v["name"]: v for v in pod["volumes"]}
    for name in ("gro-config-handoff", "gro-config-state"):  # config bytes never on disk
        assert volumes[name]["emptyDir"]["medium"] == "Memory"


@pytest.mark.parametrize("mode", MODES)
def test_the_runner_runs_its_unreadable_copy_first_on_path_whatever_path_the_template_sets(mode):
    template = {"spec": {"containers": [{"name": "runner", "env": [
        {"name": "PATH", "value": "/opt/tools/bin:/usr/bin"}]}]}}  # fmt: skip
    for spec in (cache_spec(mode), cache_spec(mode, template=template)):
        runner = containers(pod_of(spec))["runner"]
        (path,) = [e["value"] for e in runner["env"] if e["name"] == "PATH"]
        assert path.split(":")[0] == config_handoff.BIN_DIR
        mount = next(m for m in runner["volumeMounts"] if m["mountPath"] == config_handoff.BIN_DIR)
        assert mount == {"name": "gro-runner-bin", "mountPath": config_handoff.BIN_DIR,
                         "readOnly": True}  # fmt: skip
    assert "/opt/tools/bin" in path


def test_the_hand_off_sidecar_is_restricted_and_runs_as_a_user_of_its_own():
    sidecar = containers(pod_of(cache_spec("host")))["gro-config"]
    security = sidecar["securityContext"]
    assert security["runAsUser"] not in (0, 1000)
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True


def test_a_forgejo_cache_group_gets_the_hand_off_too():
    spec = parse_spec(
        {**VALID, "gitea": {"url": "https://f.example/", "flavor": "forgejo"}, "mode": "host",
         "labels": ["linux"], "cache": {"enabled": True}}
    )  # fmt: skip
    job = render_forgejo_job(spec=spec, ttl_seconds_after_finished=60, **OWNED)
    pod = job["spec"]["template"]["spec"]
    assert mounting(pod, SECRET_VOLUME) == {"gro-config"}
    runner = containers(pod)["runner"]
    assert next(e["value"] for e in runner["env"] if e["name"] == "PATH").startswith(
        config_handoff.BIN_DIR
    )


def test_without_a_cache_nothing_changes():
    spec = parse_spec({**VALID, "mode": "host", "labels": ["linux"]})
    pod = pod_of(spec)
    assert "gro-config" not in containers(pod)
    assert all(e["name"] != "PATH" for e in containers(pod)["runner"]["env"])


@pytest.mark.parametrize(
    "template",
    [
        {"spec": {"containers": [{"name": "runner", "volumeMounts": [
            {"name": "gro-runner-config", "mountPath": "/x"}]}]}},
        {"spec": {"initContainers": [{"name": "peek", "image": "i", "volumeMounts": [
            {"name": "gro-config-handoff", "mountPath": "/x"}]}]}},
        {"spec": {"initContainers": [{"name": "gro-config", "image": "i"}]}},
    ],
)  # fmt: skip
def test_a_template_cannot_mount_the_config_or_take_the_sidecars_name(template):
    with pytest.raises(InvalidSpec, match=r"gro-runner-config|gro-config-handoff|gro-config"):
        parse_spec({**VALID, "template": template})


def test_dind_mode_with_a_cache_refuses_host_labels_whose_steps_run_as_root():
    with pytest.raises(InvalidSpec, match=r"spec\.cache with mode dind and host labels"):
        cache_spec("dind", labels=["linux:docker://node:20", "shell:host"])
    # the same labels are fine without a cache, and in the modes whose runner is not root
    parse_spec({**VALID, "mode": "dind", "labels": ["shell:host"]})
    cache_spec("dind-rootless", labels=["shell:host"])


def test_dind_mode_with_a_cache_refuses_a_pod_that_shares_its_pid_namespace():
    # Before: accepted. With shared PIDs the privileged DinD daemon, and a job's
    # ``docker run --privileged --pid=host``, reach gro-config's /proc/<pid>/root and so the
    # mounted Secret.
    shared = {"spec": {"shareProcessNamespace": True}}
    refused = r"spec\.cache with mode dind and spec\.template\.spec\.shareProcessNamespace"
    with pytest.raises(InvalidSpec, match=refused):
        cache_spec("dind", template=shared)
    # fine without a cache, and in the modes where nothing in the Pod is root with
    # CAP_SYS_PTRACE (shown on the real node: tests/real_node/test_real_node_cache_secret.py)
    parse_spec({**VALID, "mode": "dind", "template": shared})
    cache_spec("dind-rootless", template=shared)
    cache_spec("host", labels=["linux"], template=shared)


# ------------------------------------------------------------- the hand-off script itself


def _run_sidecar(root: Path) -> subprocess.Popen[bytes]:
    """The script as the sidecar runs it: as its own user, not root, when the test can."""
    script = config_handoff.HANDOFF_SCRIPT.replace("/gro/", f"{root}/")
    as_its_user: dict[str, Any] = {}
    if os.geteuid() == 0:
        uid = config_handoff.HANDOFF_UID
        for d in ("handoff", "state", "bin"):
            os.chown(root / d, uid, uid)
        as_its_user = {"user": uid, "group": uid, "extra_groups": []}
    return subprocess.Popen(["/bin/sh", "-c", script], **as_its_user)


def _children(pid: int) -> list[str]:
    kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [Path(f"/proc/{kid}/comm").read_text().strip() for kid in kids]


def _read_fifo(path: Path) -> bytes:
    """Read the FIFO to its end as the runner does, but never hang the suite: a sidecar that
    cannot open its end (as when its FIFO was not writable by its own user) fails the test."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    data = b""
    try:
        while True:
            if not poller.poll(10_000):
                raise AssertionError("the sidecar never wrote the config")
            chunk = os.read(fd, 65536)
            if not chunk:
                return data
            data += chunk
    finally:
        os.close(fd)


def _wait_for(check: Any, what: str) -> None:
    for _ in range(500):
        if check():
            return
        time.sleep(0.02)
    raise AssertionError(f"never: {what}")


@pytest.fixture
def sidecar_root() -> Any:
    """A directory the sidecar's own user can reach (pytest's tmp_path is root's only)."""
    root = Path(tempfile.mkdtemp(prefix="gro-handoff-"))
    os.chmod(root, 0o755)  # noqa: S103 - the sidecar's user must reach it
    yield root
    shutil.rmtree(root)


def test_the_config_is_read_once_then_gone_and_a_restarted_sidecar_hands_out_nothing(
    sidecar_root,
):
    tmp_path = sidecar_root
    for d in ("secret", "handoff", "state", "bin"):
        (tmp_path / d).mkdir()
    (tmp_path / "secret/config.yaml").write_text("cache:\n  external_secret: s3cr3t\n")
    fifo = tmp_path / "handoff/config.yaml"
    sidecar = _run_sidecar(tmp_path)
    try:
        _wait_for(lambda: fifo.exists(), "the FIFO was made")
        assert stat.S_ISFIFO(fifo.stat().st_mode)
        assert _read_fifo(fifo) == b"cache:\n  external_secret: s3cr3t\n"  # the runner's read
        assert not fifo.exists()  # a step's read: nothing there
        assert (tmp_path / "state/delivered").exists()
    finally:
        sidecar.terminate()
        assert sidecar.wait(timeout=10) == 0  # SIGTERM ends it at once, with success
    again = _run_sidecar(tmp_path)  # the kubelet restarts a sidecar that died
    try:
        # once it sleeps, it has decided: a hand-off would be a second child (a subshell)
        _wait_for(lambda: "sleep" in _children(again.pid), "the restarted sidecar sleeps")
        assert _children(again.pid) == ["sleep"]
        assert os.listdir(tmp_path / "handoff") == []
    finally:
        again.terminate()
        again.wait(timeout=10)


def test_the_runner_file_must_stay_where_gro_register_writes_it_in_every_mode():
    text = "runner:\n  file: state.json\n"
    for mode in RunnerMode:
        problem = runner_config_problem(text, mode, init_registers=True)
        assert problem is not None and "gro-register" in problem, mode
    # every Gitea group registers in the init container, with a cache or without
    assert registers_in_init(cache_spec("dind"))
    for mode in ("dind", "dind-rootless", "host"):
        assert registers_in_init(parse_spec({**VALID, "mode": mode}))
    # a group with no registration token (Forgejo) registers each runner through the API
    assert not registers_in_init(
        parse_spec({**VALID, "mode": "dind"}).model_copy(update={"registration_token": None})
    )
