"""Mode ``dind-userns`` for real: Docker builds on the real node with no privileged container,
the runner Pod in its own user namespace, in a namespace that enforces Pod Security
``baseline`` (docs/decisions/0006-docker-in-a-user-namespace.md).

The node runs containerd 2.4 and runc 1.5 built from their Go modules, with the RuntimeClass
``gitea-runner-userns`` whose base spec gives Pods ``/dev/net/tun`` (tests/testbed/realnode.py).
The daemon sidecar's image is Debian's Docker with rootlesskit and slirp4netns, and preloads
the job images (no registry here); the script that starts it is the operator's own.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.real_node import DIND_WORKFLOW, LOCAL, USERNS_DAEMON, Real, on_real_node
from tests.support.testbed import condition, group_status, wait_until
from tests.testbed import images
from tests.testbed.realnode import NO_USERNS_HANDLER, NODE_NAME

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.real_node]

# The DinD suite's two jobs, and one with a service container it reaches by name.
USERNS_WORKFLOW = (
    DIND_WORKFLOW.replace("gro-real-dind", "gro-real-userns")
    + """\
  with-service:
    runs-on: gro-real-userns
    container:
      image: docker.io/local/busybox:1.35
    services:
      web:
        image: docker.io/local/busybox-web:1.35
    steps:
      - run: |
          set -eu
          i=0
          until page=$(wget -qO- http://web:8080/index.html); do
            i=$((i + 1)); [ $i -lt 30 ] || exit 1; sleep 1
          done
          echo "the service answered: $page"
          test "$page" = "served by a job's service container"
"""
)

JOBS = {"in-container", "docker-build", "with-service"}


def baseline_namespace(real: Real) -> None:
    """What the team's namespace enforces from here on: Pod Security ``baseline``."""
    labels = {f"pod-security.kubernetes.io/{m}": "baseline" for m in ("enforce", "warn")}
    real.kube.patch(f"/api/v1/namespaces/{real.ns}", {"metadata": {"labels": labels}})


def userns_group(real: Real, name: str, label: str, **spec: Any) -> None:
    spec.setdefault("template", on_real_node(init=[USERNS_DAEMON]))
    real.group(
        name,
        # mode left out on purpose: dind-userns is the default for a new group
        labels=[f"{label}:docker://{LOCAL}{images.BUSYBOX}"],
        image=LOCAL + images.RUNNER,
        maxActiveRunners=3,
        **spec,
    )


def test_dind_userns_builds_runs_a_container_job_and_a_service_under_baseline(real):
    baseline_namespace(real)
    userns_group(real, "userns", "gro-real-userns")
    stored = real.kube.get(f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{real.ns}/runnergroups/userns")
    assert stored["spec"]["mode"] == "dind-userns"  # the CRD's default, written into the group
    real.push("userns.yml", USERNS_WORKFLOW)
    done = real.wait_done(JOBS, timeout=480)
    assert done == dict.fromkeys(JOBS, "success"), (
        {n: real.job_log(n) for n in JOBS},
        real.pods_report(),
    )
    assert "docker build and run in DinD: ok" in real.job_log("docker-build")
    assert "the service answered" in real.job_log("with-service")
    pods = real.pods("userns")
    assert pods and {p["spec"]["nodeName"] for p in pods} == {NODE_NAME}
    for pod in pods:
        spec = pod["spec"]
        assert spec["hostUsers"] is False
        assert spec["runtimeClassName"] == "gitea-runner-userns"
        containers = [*spec.get("initContainers", []), *spec["containers"]]
        assert not [
            c["name"] for c in containers if (c.get("securityContext") or {}).get("privileged")
        ]
        daemon = next(c for c in spec["initContainers"] if c["name"] == "dockerd")
        assert daemon["restartPolicy"] == "Always"
        runner = next(c for c in spec["containers"] if c["name"] == "runner")
        assert runner["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert runner["securityContext"]["runAsNonRoot"] is True


def on_runtime(real: Real, group: str, label: str, runtime_class: str, handler: str) -> None:
    """A dind-userns group whose Pods name ``runtime_class`` (made here, with ``handler``),
    with the userns workflow queued for it."""
    classes = "/apis/node.k8s.io/v1/runtimeclasses"
    if not real.kube.exists(f"{classes}/{runtime_class}"):
        real.kube.post(
            classes,
            {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
             "metadata": {"name": runtime_class}, "handler": handler},
        )  # fmt: skip
    template = on_real_node(init=[USERNS_DAEMON], runtimeClassName=runtime_class)
    userns_group(real, group, label, template=template)
    real.push(f"{group}.yml", USERNS_WORKFLOW.replace("gro-real-userns", label))


def runners_healthy_saying(real: Real, group: str, needle: str) -> str:
    """The group's RunnersHealthy message once it contains ``needle`` (4 minutes at most)."""

    def says() -> str | None:
        cond = condition(group_status(real.kube, real.ns, group), "RunnersHealthy")
        message = str(cond.get("message") or "")
        return message if needle in message else None

    try:
        return str(wait_until(says, timeout=240, what=f"RunnersHealthy names {needle!r}"))
    except TimeoutError:
        raise AssertionError(real.pods_report()) from None


def test_a_pod_without_the_tun_device_names_what_the_node_lacks(real):
    """A RuntimeClass that gives no /dev/net/tun (the node's default runc handler): the
    daemon refuses to start, and the group's condition says why, not a back-off."""
    on_runtime(real, "no-tun", "gro-real-notun", "runc-default", "runc")
    assert "RuntimeClass" in runners_healthy_saying(real, "no-tun", "no /dev/net/tun")


# ------------------------------------------------------------- what a job can reach: the node

# Run by a job in a container that holds the daemon's socket, as the container's root. Every
# attempt is bounded; each says what it got. @DISK@ is the node's disk (a path on the node),
# @DEV@ its device numbers (major minor), @REL@ the marker directory's path on it, @PID@ a
# process on the node outside every Pod. Two ways to the disk: a device the daemon hands in
# (--device, with CAP_SYS_ADMIN to mount it), and --privileged with a device node made
# inside (this machine's DinD refuses --privileged: its root lacks some capabilities).
ESCAPE_PROBE = r"""
set -u
B=docker.io/local/busybox:1.35
T="timeout 60"
one() { tr '\n' ' ' | cut -c1-300; echo; }
echo "PROBE uid_map: $(tr -s ' ' </proc/self/uid_map | one)"
# control: where the daemon may write (its own files), the probe's write lands and reads
# back; and a process of the job's own ends by its signal
$T docker run --rm -v /tmp/gro-own:/own $B sh -c 'echo mine >/own/f' || true
echo "PROBE control write: $($T docker run --rm -v /tmp/gro-own:/own $B cat /own/f 2>&1 | one)"
sleep 300 & own=$!
kill -TERM $own
wait $own 2>/dev/null || echo "PROBE control signal: own child ended"
# the node's files through the daemon: its root bound in, then the node's disk itself
echo "PROBE bind write: $($T docker run --rm -v /:/host $B sh -c \
  'mkdir -p /host@REL@ && echo escaped >/host@REL@/bind && echo wrote' 2>&1 | one)"
DISK="--cap-add SYS_ADMIN --security-opt seccomp=unconfined --device @DISK@:/dev/gro-disk"
echo "PROBE disk write: $($T docker run --rm $DISK $B sh -c \
  'mkdir -p /mnt/n && mount -t @FSTYPE@ /dev/gro-disk /mnt/n \
   && echo escaped >/mnt/n@REL@/disk && echo wrote' 2>&1 | one)"
echo "PROBE disk write privileged: $($T docker run --rm --privileged $B sh -c \
  'mknod /tmp/disk b @DEV@ && mkdir -p /mnt/n && mount /tmp/disk /mnt/n \
   && echo escaped >/mnt/n@REL@/privileged && echo wrote' 2>&1 | one)"
echo "PROBE kubelet: $($T docker run --rm $DISK $B sh -c \
  'mkdir -p /mnt/n && mount -t @FSTYPE@ /dev/gro-disk /mnt/n \
   && ls /mnt/n/var/lib/kubelet /mnt/n/var/lib/gro-realnode/kubelet/pods' 2>&1 | one)"
echo "PROBE kubelet bind: $($T docker run --rm -v /var/lib/kubelet:/k $B ls -la /k 2>&1 | one)"
# a process outside the Pod: by its number, from the job and from the daemon's PID namespace
echo "PROBE signal: $(kill -TERM @PID@ 2>&1 | one)"
echo "PROBE signal pid=host: $($T docker run --rm --pid=host $B kill -TERM @PID@ 2>&1 | one)"
echo "PROBE signal privileged: $($T docker run --rm --privileged --pid=host $B \
  kill -TERM @PID@ 2>&1 | one)"
"""


def _escape_workflow(label: str, script: str) -> str:
    body = "\n".join("          " + line for line in script.strip().splitlines())
    return f"""\
name: escape-{label}
on: [push]
jobs:
  probe:
    runs-on: {label}
    container:
      image: docker.io/local/busybox-docker:1.35
      volumes:
        - /var/run/docker.sock:/var/run/docker.sock
    steps:
      - shell: sh
        run: |
{body}
"""


@pytest.mark.parametrize("mode", ["dind-userns", "dind"])
def test_a_job_cannot_reach_the_node_in_dind_userns_as_it_can_in_dind(real, mode, tmp_path):
    """The escape probes (docs/security.md, "What job code can reach, by mode"). ``dind`` is
    the control: the same probe, through a privileged daemon, writes to the node's disk and
    reads the kubelet's files, so a probe that reaches nothing cannot pass for a defence."""
    from tests.support.real_node import DIND_CONFIG, DIND_SIDECAR, runner_config
    from tests.testbed.realnode import ROOT_DIR

    marker = ROOT_DIR / f"escape-{mode}"
    marker.mkdir(parents=True, exist_ok=True)
    st = os.stat(marker)
    mount = subprocess.run(
        ["findmnt", "-n", "-o", "TARGET", "-T", str(marker)], capture_output=True, text=True
    ).stdout.strip()
    rel = "/" + str(marker.relative_to(mount))
    disk, fstype = subprocess.run(
        ["findmnt", "-n", "-o", "SOURCE,FSTYPE", "-T", str(marker)], capture_output=True, text=True
    ).stdout.split()
    outside = subprocess.Popen(["sleep", "600"])  # a process on the node, in no Pod
    label = f"gro-escape-{mode}"
    # dind: the daemon is on TCP, so the workflow mounts its socket (allowed by the config);
    # dind-userns: on a Unix socket, which the runner mounts into job containers itself
    extra = (
        {"runnerConfig": runner_config(real, f"escape-{mode}", DIND_CONFIG)}
        if mode == "dind"
        else {}
    )
    sidecar = DIND_SIDECAR if mode == "dind" else USERNS_DAEMON
    try:
        real.group(
            f"escape-{mode}",
            mode=mode,
            labels=[f"{label}:docker://{LOCAL}{images.BUSYBOX_DOCKER}"],
            image=LOCAL + images.RUNNER,
            maxActiveRunners=1,
            template=on_real_node(init=[sidecar]),
            **extra,
        )
        script = (
            ESCAPE_PROBE.replace("@DEV@", f"{os.major(st.st_dev)} {os.minor(st.st_dev)}")
            .replace("@DISK@", disk)
            .replace("@FSTYPE@", fstype)
            .replace("@REL@", rel)
            .replace("@PID@", str(outside.pid))
        )
        real.push("escape.yml", _escape_workflow(label, script))
        done = real.wait_done({"probe"}, timeout=420)
        log = real.job_log("probe")
        probes = "\n".join(ln for ln in log.splitlines() if "PROBE " in ln and "echo" not in ln)
        print(f"\n--- {mode}: what the job reached\n{probes}")
        assert done == {"probe": "success"}, real.failed_job_report(log)
        # the controls: the probe writes and signals where it may
        assert "PROBE control write: mine" in log, probes
        assert "PROBE control signal: own child ended" in log, probes
        # a process outside every Pod, by its number: alive, whatever the mode
        assert outside.poll() is None, probes
        written = sorted(p.name for p in marker.iterdir())
        if mode == "dind":
            assert "PROBE uid_map: 0 0 4294967295" in " ".join(log.split()), probes
            # through the privileged daemon a container mounts the node's disk and writes there
            assert "disk" in written, probes
            assert re.search(r"PROBE kubelet: .*device-plugins", log), probes
            return
        # dind-userns: nothing reached the node's disk, by the daemon's root or by the device
        assert written == [], probes
        assert re.search(r"PROBE disk write: .*(no such file|not permitted|denied)", log), probes
        assert re.search(r"PROBE disk write privileged: .*(not permitted|denied)", log), probes
        assert "device-plugins" not in log, probes
        # the job's ids are the Pod's 65,536 (its namespace nests in the Pod's), never the
        # node's whole range as in dind (4294967295 ids from 0: the node's root is its root)
        uid_map = re.search(r"PROBE uid_map:([\d ]+)", probes)
        assert uid_map and "4294967295" not in uid_map.group(1), probes
        assert sum(int(n) for n in uid_map.group(1).split()[2::3]) == 65536, probes
        # the job's root is root of a namespace nested in the Pod's, whose range on the node
        # the runner's own processes show (below): never the node's uid 0
        pods = real.pods(f"escape-{mode}")
        assert pods[0]["spec"]["hostUsers"] is False
        assert _pod_host_uids(pods[0]) and min(_pod_host_uids(pods[0])) >= 65536, probes
    finally:
        outside.kill()
        outside.wait()
        shutil.rmtree(marker, ignore_errors=True)


def _pod_host_uids(pod: dict[str, Any]) -> set[int]:
    """The node's uids of the Pod's processes, read from the node's /proc: the Pod's cgroup
    names its uid."""
    uid = pod["metadata"]["uid"]
    uids: set[int] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if (
                uid.replace("-", "_") in (proc / "cgroup").read_text()
                or uid in (proc / "cgroup").read_text()
            ):
                uids.add(proc.stat().st_uid)
    return uids


def test_a_node_whose_runtime_lacks_user_namespaces_is_named_not_worked_around(real):
    """The RuntimeClass's handler is a runc 1.1 (Debian's), which has no user namespaces:
    the kubelet refuses the Pod's sandbox, and the group says so with the remedy. No Pod of
    the group ever runs in the node's user namespace instead."""
    on_runtime(real, "old-runtime", "gro-real-old", NO_USERNS_HANDLER, NO_USERNS_HANDLER)
    message = runners_healthy_saying(real, "old-runtime", "sandbox")
    assert "user namespaces" in message and "dind or dind-rootless explicitly" in message
    pods = real.pods("old-runtime")
    assert pods and all(p["spec"]["hostUsers"] is False for p in pods)
    assert not [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
