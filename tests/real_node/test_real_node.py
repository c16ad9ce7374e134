"""Every runner mode for real: the operator's runner Pods on the testbed's real node (a real
kubelet with containerd and runc), running the session's runner (the testbed's runner on
the official engine ``gitea.com/gitea/act``, or ``GRO_TESTBED_RUNNER_BIN``) from locally built
images against a real Gitea, with real workflows pushed to real repositories.

Nothing is faked here: the images are the ones :mod:`tests.testbed.images` builds (the
runner image with an entrypoint written from the official image's documented behaviour,
Debian's Docker as the DinD sidecar), and a test passes only when Gitea reports the workflow
job's conclusion. Pods reach Gitea on the node's bridge address (a socat forward of its loopback
port; TLS terminated by socat for the private-CA test).

Needs Linux, root and the Debian packages (see README, "Testing"); the ``real_node`` fixture
skips, saying so plainly, where they are missing, and fails in CI. One node, so these tests
run one after another, never in parallel.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import manifests
from tests.support.real_node import (
    DIND_CONFIG,
    DIND_SIDECAR,
    DIND_WORKFLOW,
    LOCAL,
    ROOTLESS_CONFIG,
    Real,
    on_real_node,
    runner_config,
)
from tests.support.testbed import (
    GROUPS,
    condition,
    group_status,
    runner_jobs,
    wait_until,
)
from tests.testbed import images, realnode, runners
from tests.testbed.realnode import GATEWAY, NODE_NAME
from tests.testbed.sandbox import free_port

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.real_node]


def _real_pods_ran_here(real: Real, group: str) -> list[dict[str, Any]]:
    pods = real.pods(group)
    assert pods, "no runner Pod"
    assert {p["spec"]["nodeName"] for p in pods} == {NODE_NAME}
    return pods


# ---------------------------------------------------------------------------------- host

HOST_WORKFLOW = """\
name: real-host
on: [push]
jobs:
  host:
    runs-on: gro-real-host
    steps:
      - run: |
          set -eu
          echo "runner binary: $(gitea-runner --version)"
          echo "uid=$(id -u) gid=$(id -g) home=$HOME pwd=$(pwd)"
          test "$(id -u)" = 1000
          # the registration token is in no environment of this container (not even the
          # entrypoint's, PID 1) and no token file exists
          for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < "$f" 2>/dev/null || true; done \\
            > /tmp/environs
          if grep -q '^GITEA_RUNNER_REGISTRATION_TOKEN' /tmp/environs; then
            echo "TOKEN IN AN ENVIRONMENT"; exit 1
          fi
          test -z "${GITEA_RUNNER_REGISTRATION_TOKEN_FILE:-}"
          echo "--- environment of PID 1"
          tr '\\0' '\\n' < /proc/1/environ
          echo "--- /data"
          ls -la /data
          cat /data/.runner
"""


def test_host_mode_runs_a_real_workflow_and_steps_never_see_the_registration_token(real):
    real.group(
        "host",
        mode="host",
        labels=["gro-real-host"],
        image=LOCAL + images.RUNNER,
        template=on_real_node(),
    )
    real.push("host.yml", HOST_WORKFLOW)
    assert real.wait_done({"host"}) == {"host": "success"}, real.job_log("host")
    log = real.job_log("host")
    assert f"runner binary: {runners.resolve().version_line}" in log
    assert real.target.registration_token not in log  # env, PID 1's env, /data/.runner
    pods = _real_pods_ran_here(real, "host")
    # the token reached only the gro-register init container, which ran to completion first
    statuses = {c["name"]: c for c in pods[0]["status"].get("initContainerStatuses") or []}
    assert statuses["gro-register"]["state"]["terminated"]["exitCode"] == 0
    runner = next(c for c in pods[0]["spec"]["containers"] if c["name"] == "runner")
    assert not [e for e in runner.get("env", []) if "TOKEN" in e["name"]]


# ---------------------------------------------------------------------------------- dind


def test_dind_mode_runs_a_container_job_and_a_docker_build(real):
    real.group(
        "dind",
        mode="dind",
        labels=[f"gro-real-dind:docker://{LOCAL}{images.BUSYBOX}"],
        image=LOCAL + images.RUNNER,
        runnerConfig=runner_config(real, "dind-config", DIND_CONFIG),
        template=on_real_node(init=[DIND_SIDECAR]),
    )
    real.push("dind.yml", DIND_WORKFLOW)
    done = real.wait_done({"in-container", "docker-build"}, timeout=420)
    assert done == {"in-container": "success", "docker-build": "success"}, (
        real.job_log("in-container"),
        real.job_log("docker-build"),
    )
    assert "docker build and run in DinD: ok" in real.job_log("docker-build")
    pods = _real_pods_ran_here(real, "dind")
    sidecar = next(c for c in pods[0]["spec"]["initContainers"] if c["name"] == "dind")
    assert sidecar["restartPolicy"] == "Always"  # a native sidecar, started before the runner


# ------------------------------------------------------------------ templated Pod, HTTPS

TEMPLATED_WORKFLOW = """\
name: real-templated
on: [push]
jobs:
  templated:
    runs-on: gro-real-tpl
    steps:
      - run: |
          set -eu
          echo "gitea over: $GITHUB_SERVER_URL; SSL_CERT_FILE=$SSL_CERT_FILE"
          test -s "$SSL_CERT_FILE"
          # read-only root file system, as the template asks; /tmp is the template's emptyDir
          if touch /rootfs-probe 2>/dev/null; then echo "ROOT FS WRITABLE"; exit 1; fi
          touch /tmp/ok
          # the template's sidecar answers on the Pod's loopback
          exec 3<>/dev/tcp/127.0.0.1/8080
          printf 'GET /hello.txt HTTP/1.0\\r\\n\\r\\n' >&3
          reply=$(cat <&3)
          echo "$reply" | grep -q 'hello from the sidecar'
          echo "memory limit: $(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null)"
          echo "templated pod: ok"
"""


def private_ca(tmp: Path) -> tuple[Path, Path]:
    """A private CA and, signed by it, a certificate for the node's bridge address:
    (ca.crt, server.pem with certificate and key)."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=tmp)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=gro real CA",
        "-keyout", "ca.key", "-out", "ca.crt")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={GATEWAY}",
        "-keyout", "server.key", "-out", "server.csr")  # fmt: skip
    (tmp / "san.ext").write_text(f"subjectAltName=IP:{GATEWAY},IP:127.0.0.1\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.crt")  # fmt: skip
    pem = tmp / "server.pem"
    pem.write_text((tmp / "server.crt").read_text() + (tmp / "server.key").read_text())
    return tmp / "ca.crt", pem


def test_a_templated_pod_with_resources_security_a_sidecar_and_a_private_ca(
    real, cluster, tmp_path
):
    ca, pem = private_ca(tmp_path)
    gitea_port = int(cluster.gitea_url.rsplit(":", 1)[1])
    https = f"https://{real.node.expose(gitea_port, tls_pem=pem, listen_port=free_port())}"
    manifests.apply(
        real.kube,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "corp-ca"},
         "data": {"ca.crt": ca.read_text()}},
        namespace=real.ns,
    )  # fmt: skip
    sidecar = {
        "name": "hello",
        "image": LOCAL + images.BUSYBOX,
        "imagePullPolicy": "Never",
        "restartPolicy": "Always",
        "command": ["sh", "-c",
                    "mkdir -p /tmp/www && echo 'hello from the sidecar' > /tmp/www/hello.txt"
                    " && exec httpd -f -p 127.0.0.1:8080 -h /tmp/www"],
        "securityContext": {"runAsUser": 1000, "allowPrivilegeEscalation": False},
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                      "limits": {"memory": "32Mi"}},
    }  # fmt: skip
    runner = {
        "resources": {
            "requests": {"cpu": "100m", "memory": "64Mi"},
            "limits": {"cpu": "1", "memory": "512Mi"},
        },
        "securityContext": {"readOnlyRootFilesystem": True},
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    real.group(
        "templated",
        url=https,
        mode="host",
        labels=["gro-real-tpl"],
        image=LOCAL + images.RUNNER,
        gitea={"url": https, "caBundle": {"configMapKeyRef": {"name": "corp-ca", "key": "ca.crt"}}},
        template=on_real_node(
            runner=runner, init=[sidecar], volumes=[{"name": "tmp", "emptyDir": {}}]
        ),
    )
    real.push("templated.yml", TEMPLATED_WORKFLOW)
    assert real.wait_done({"templated"}) == {"templated": "success"}, real.job_log("templated")
    log = real.job_log("templated")
    assert "templated pod: ok" in log
    assert "memory limit: 536870912" in log  # the template's limit, enforced by the kubelet
    pods = _real_pods_ran_here(real, "templated")
    runner_spec = next(c for c in pods[0]["spec"]["containers"] if c["name"] == "runner")
    assert runner_spec["securityContext"]["readOnlyRootFilesystem"] is True
    assert runner_spec["securityContext"]["runAsUser"] == 1000  # the mode's, kept


# ---------------------------------------------------------------------------- failures


def test_an_image_never_imported_reports_runner_pods_not_starting_with_the_pull_reason(real):
    real.group(
        "no-image",
        mode="host",
        labels=["gro-real-none"],
        image=LOCAL + "local/never-imported:1",
        minIdleRunners=1,
        template=on_real_node(),
    )
    healthy = wait_until(
        lambda: (
            (c := condition(group_status(real.kube, real.ns, "no-image"), "RunnersHealthy"))
            .get("reason") == "RunnerPodsNotStarting" and c
        ),
        timeout=120,
        what="RunnersHealthy=False RunnerPodsNotStarting",
    )  # fmt: skip
    assert healthy["status"] == "False"
    assert "ErrImageNeverPull" in healthy["message"], healthy
    assert "local/never-imported:1" in healthy["message"], healthy


OOM_WORKFLOW = """\
name: real-oom
on: [push]
jobs:
  hungry:
    runs-on: gro-real-oom
    steps:
      - run: |
          echo "allocating past the runner container's memory limit"
          x=$(head -c 400000000 /dev/zero | tr '\\0' a)
          echo "survived: $((20 + 22))"
"""


def test_a_memory_limit_oom_kills_the_job_mid_step(real):
    real.group(
        "oom",
        mode="host",
        labels=["gro-real-oom"],
        image=LOCAL + images.RUNNER,
        template=on_real_node(runner={"resources": {"limits": {"memory": "96Mi"}}}),
    )
    real.push("oom.yml", OOM_WORKFLOW)
    done = real.wait_done({"hungry"}, timeout=240)
    assert done == {"hungry": "failure"}, real.job_log("hungry")
    log = real.job_log("hungry")
    assert "survived: 42" not in log
    print(f"OOM: job conclusion {done}; job log tail:\n{log[-1500:]}\n{real.pods_report()}")


BUSY_WORKFLOW = """\
name: real-busy
on: [push]
jobs:
  long:
    runs-on: gro-real-busy
    steps:
      - run: |
          echo "long step started"
          sleep 600
"""


def test_a_busy_runner_pod_deleted_with_a_grace_period_gets_sigterm(real):
    real.group(
        "busy",
        mode="host",
        labels=["gro-real-busy"],
        image=LOCAL + images.RUNNER,
        template=on_real_node(terminationGracePeriodSeconds=30),
    )
    real.push("busy.yml", BUSY_WORKFLOW)
    wait_until(
        lambda: real.jobs().get("long", {}).get("status") == "in_progress",
        timeout=180,
        what="the long job running",
    )
    pod = wait_until(
        lambda: next(
            (p for p in real.pods("busy") if (p.get("status") or {}).get("phase") == "Running"),
            None,
        ),
        what="the busy runner Pod running",
    )
    name = pod["metadata"]["name"]
    time.sleep(3)  # the step is in its sleep
    t0 = time.monotonic()
    real.kube.delete(
        f"/api/v1/namespaces/{real.ns}/pods/{name}",
        body={"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 30},
    )
    runner_log = ""
    while real.kube.exists(f"/api/v1/namespaces/{real.ns}/pods/{name}"):
        assert time.monotonic() - t0 < 90, "the deleted Pod is still there after 90 s"
        text = real.container_log(pod, "runner")
        # the log while the Pod terminates; once the container is removed (the Pod object
        # may outlive it for a moment on a loaded machine) the API server answers with its
        # failure as the body, which must not replace the last log read
        if not text.startswith(("(", "unable to retrieve container logs")):
            runner_log = text
        time.sleep(1)
    gone_after = time.monotonic() - t0
    time.sleep(5)
    job = real.jobs()["long"]
    print(
        f"SIGTERM: Pod gone {gone_after:.1f}s after the delete (grace 30s); Gitea job "
        f"{job['status']}/{job.get('conclusion')}; runner log:\n{runner_log}"
    )
    # The runner got SIGTERM (tini passes it on) and began its shutdown at once...
    assert "shutdown initiated" in runner_log, runner_log
    # ...but cannot end a host-mode step's child processes: the kubelet kills them at the
    # end of the grace period, and Gitea shows the job running until its zombie-task
    # clean-up (30 s on the testbed) fails it; then the operator re-runs it (README, "Lost
    # runners"), so the newest job of that name is running, failed, or queued again: never
    # a success the killed step did not earn.
    assert 25 < gone_after < 45, gone_after
    assert (job["status"], job.get("conclusion")) != ("completed", "success"), job


def test_a_runner_that_does_not_register_within_startup_timeout_is_replaced(real):
    # A user's init container that never finishes: the runner never registers.
    stuck = {
        "name": "slow-setup",
        "image": LOCAL + images.BUSYBOX,
        "imagePullPolicy": "Never",
        "command": ["sleep", "3600"],
        "securityContext": {"runAsUser": 1000},
    }
    real.group(
        "slow",
        mode="host",
        labels=["gro-real-slow"],
        image=LOCAL + images.RUNNER,
        startupTimeout="60s",  # the shortest allowed
        minIdleRunners=1,
        template=on_real_node(init=[stuck]),
    )
    first = wait_until(lambda: runner_jobs(real.kube, real.ns, "slow"), what="a runner Job")[0]
    first_name = first["metadata"]["name"]
    wait_until(
        lambda: any(
            (p.get("status") or {}).get("phase") == "Pending" and p["spec"].get("nodeName")
            for p in real.pods("slow")
        ),
        what="its Pod on the node, initialising",
    )
    t0 = time.monotonic()
    wait_until(
        lambda: (
            first_name
            not in {j["metadata"]["name"] for j in runner_jobs(real.kube, real.ns, "slow")}
        ),
        timeout=180,
        what="the runner Job reaped after startupTimeout",
    )
    reaped_after = time.monotonic() - t0
    events = real.kube.get(f"/api/v1/namespaces/{real.ns}/events")["items"]
    reasons = [e.get("message", "") for e in events]
    assert any("startupTimeout" in m for m in reasons), reasons
    print(f"startupTimeout 60s: reaped {reaped_after:.0f}s after its Pod was on the node")
    with contextlib.suppress(Exception):
        real.kube.delete(f"{GROUPS.format(ns=real.ns)}/slow")


# ------------------------------------------------------------------------ dind-rootless


def test_dind_rootless_mode_runs_a_container_job_and_a_docker_build(real):
    # the same workflow, with the rootless daemon's socket given to the docker-build job
    workflow = DIND_WORKFLOW.replace("gro-real-dind", "gro-real-rootless").replace(
        "- /var/run/docker.sock:/var/run/docker.sock",
        "- /run/user/1000/docker.sock:/var/run/docker.sock",
    )
    real.group(
        "rootless",
        mode="dind-rootless",
        labels=[f"gro-real-rootless:docker://{LOCAL}{images.BUSYBOX}"],
        image=LOCAL + images.ROOTLESS,
        runnerConfig=runner_config(real, "rootless-config", ROOTLESS_CONFIG),
        template=on_real_node(),
    )
    real.push("rootless.yml", workflow)
    done = real.wait_done({"in-container", "docker-build"}, timeout=420)
    assert done == {"in-container": "success", "docker-build": "success"}, (
        real.job_log("in-container"),
        real.job_log("docker-build"),
        real.pods_report(),
    )
    assert "docker build and run in DinD: ok" in real.job_log("docker-build")
    pods = _real_pods_ran_here(real, "rootless")
    runner = next(c for c in pods[0]["spec"]["containers"] if c["name"] == "runner")
    assert runner["securityContext"] == {"privileged": True}  # the mode's: no sidecar


# ----------------------------------------------------------------- the node's own network


def test_the_gateway_keeps_its_mac_address_while_pods_come_and_go(real_node):
    """Last in this file, after dozens of Pods joined and left the bridge. A bridge that
    followed its ports' MACs changed the gateway's MAC under running Pods: their calls to
    Gitea stalled until their ARP entries were re-validated (up to a minute), and Gitea's
    zombie-task clean-up failed jobs that were running fine (the DinD and rootless flakes)."""
    bridge = Path(f"/sys/class/net/{realnode.BRIDGE}")
    assert (bridge / "address").read_text().strip() == realnode.BRIDGE_MAC
    assert (bridge / "addr_assign_type").read_text().strip() == "3"  # set, never inherited
