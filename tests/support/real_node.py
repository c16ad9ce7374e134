"""What the real-node suite's tests share: the Pod template that puts runner Pods on the
testbed's real node, and ``Real``, a team namespace with the operator running there."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from tests.support import manifests
from tests.support.testbed import (
    GROUPS,
    runner_group,
    wait_until,
)
from tests.testbed import images
from tests.testbed.realnode import NODE_LABEL

TOLERATION = {"key": NODE_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
LOCAL = "docker.io/"  # the kubelet's name for local/x:1, as the images were imported


def on_real_node(
    runner: dict[str, Any] | None = None,
    init: list[dict[str, Any]] | None = None,
    **pod: Any,
) -> dict[str, Any]:
    """A ``spec.template`` that puts runner Pods on the real node, with local images only."""
    spec: dict[str, Any] = {
        "nodeSelector": {NODE_LABEL: "true"},
        "tolerations": [TOLERATION],
        "terminationGracePeriodSeconds": 10,
        "containers": [{"name": "runner", "imagePullPolicy": "Never", **(runner or {})}],
        **pod,
    }
    if init:
        spec["initContainers"] = init
    return {"spec": spec}


class Real:
    def __init__(self, kube, cluster, ns, target, url, node, op) -> None:
        self.kube, self.cluster, self.ns, self.target = kube, cluster, ns, target
        self.url, self.node, self.op = url, node, op
        self.gitea = cluster.gitea_client()

    def group(self, name: str, *, url: str | None = None, **spec: Any) -> None:
        body = runner_group(name, target=self.target, url=url or self.url, **spec)
        manifests.apply(self.kube, body, namespace=self.ns)

    def wait_cache_settled(self, name: str, timeout: float = 180) -> None:
        """Wait until the operator has seen the group's latest spec (a runner rendered from
        an older one would lack its ``hostAliases``) and its cache server is ready. A timeout
        says what the group's status held, which is what tells a slow pass from a lost one."""
        path = f"{GROUPS.format(ns=self.ns)}/{name}"

        def settled() -> bool:
            obj = self.kube.get(path)
            status = obj.get("status") or {}
            return bool(
                status.get("observedGeneration") == obj["metadata"]["generation"]
                and (status.get("cache") or {}).get("ready")
            )

        try:
            wait_until(settled, timeout=timeout, what=f"group {name}: spec observed, cache ready")
        except TimeoutError as exc:
            obj = self.kube.get(path)
            seen = {"generation": obj["metadata"].get("generation"), "status": obj.get("status")}
            raise AssertionError(f"{exc}; the group: {json.dumps(seen, indent=1)}") from None

    def push(self, name: str, workflow: str) -> None:
        self.gitea.push_workflow(self.target.org, self.target.repo, name, workflow)

    def jobs(self) -> dict[str, dict[str, Any]]:
        found = self.gitea.list_jobs("repo", self.target.org, self.target.repo, status=None)
        return {j["name"]: j for j in found}

    def wait_done(self, names: set[str], timeout: float = 300) -> dict[str, str]:
        """Wait until Gitea reports every named job completed; name -> conclusion."""

        def done() -> dict[str, str] | None:
            jobs = self.jobs()
            if names <= set(jobs) and all(jobs[n]["status"] == "completed" for n in names):
                return {n: jobs[n].get("conclusion") or "" for n in names}
            return None

        try:
            return wait_until(done, timeout=timeout, what=f"jobs {sorted(names)} completed")
        except TimeoutError:
            raise AssertionError(f"jobs not done: {self.jobs()}\n{self.pods_report()}") from None

    def job_log(self, name: str) -> str:
        job = self.jobs()[name]
        req = urllib.request.Request(
            f"{self.cluster.gitea_url}/api/v1/repos/{self.target.org}/{self.target.repo}"
            f"/actions/jobs/{job['id']}/logs",
            headers={"Authorization": f"token {self.cluster.gitea_token}"},
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return str(resp.read().decode(errors="replace"))
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
            return f"(no log: Gitea answered 404; job {job['status']}/{job.get('conclusion')})"

    def pods(self, group: str) -> list[dict[str, Any]]:
        selector = f"gitea.bpg.pw/runnergroup-name={group}"
        return self.kube.get(f"/api/v1/namespaces/{self.ns}/pods", labelSelector=selector)["items"]

    def pods_report(self) -> str:
        pods = self.kube.get(f"/api/v1/namespaces/{self.ns}/pods")["items"]
        lines = []
        for p in pods:
            st = p.get("status") or {}
            lines.append(
                f"{p['metadata']['name']} {st.get('phase')} node={p['spec'].get('nodeName')} "
                + json.dumps(
                    [
                        (c["name"], c.get("state"))
                        for c in (st.get("initContainerStatuses") or [])
                        + (st.get("containerStatuses") or [])
                    ]
                )[:1500]
            )
            for c in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
                lines.append(f"--- {c['name']} log:\n{self.container_log(p, c['name'])}")
        return "\n".join(lines) + "\n--- kubelet:\n" + self.node.log_tail("kubelet", 15)

    def failed_job_report(self, log: str, tail: int = 80) -> str:
        """Why a probe job failed, for an assertion message: the Pods first, then the job log's
        last ``tail`` lines with each step's echoed script cut to one short line. A CI log keeps
        a long message's start and end only, and the script echo (a few KB per step) used to
        push the failing step's own lines into the part it cut."""
        lines = [
            ln[:200] + " [...]" if "\u2b50 Run" in ln and len(ln) > 200 else ln
            for ln in log.splitlines()
        ]
        return f"{self.pods_report()}\n--- job log, last {tail} lines:\n" + "\n".join(lines[-tail:])

    def container_log(self, pod: dict[str, Any], container: str) -> str:
        """``pods/log`` through the API server (which asks the kubelet on its InternalIP)."""
        name = pod["metadata"]["name"]
        url = (
            f"{self.kube.server}/api/v1/namespaces/{self.ns}/pods/{name}/log"
            f"?container={container}&tailLines=40"
        )
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.kube.token}"})
        try:
            with urllib.request.urlopen(req, context=self.kube._ctx, timeout=10) as resp:
                return str(resp.read().decode(errors="replace"))
        except Exception as e:  # a container that never started has no log
            return f"({e})"


DIND_SIDECAR = {"name": "dind", "image": LOCAL + images.DIND, "imagePullPolicy": "Never"}
# dind-userns's daemon sidecar with the testbed's image (the operator's command kept).
USERNS_DAEMON = {
    "name": "dockerd",
    "image": LOCAL + images.USERNS_DAEMON,
    "imagePullPolicy": "Never",
}


# A container: job, and a job that builds and runs an image through the daemon.
DIND_WORKFLOW = """\
name: real-dind
on: [push]
defaults:
  run:
    shell: sh
jobs:
  in-container:
    runs-on: gro-real-dind
    container:
      image: docker.io/local/busybox:1.35
    steps:
      - run: |
          set -eu
          grep -q '^user:x:1000:' /etc/passwd
          echo "in a container: $(busybox | head -n 1)"
  docker-build:
    runs-on: gro-real-dind
    container:
      image: docker.io/local/busybox-docker:1.35
      volumes:
        - /var/run/docker.sock:/var/run/docker.sock
    steps:
      - run: |
          set -eu
          mkdir ctx
          printf 'FROM docker.io/local/busybox:1.35\\nRUN echo built-in-dind > /built\\n' \\
            > ctx/Dockerfile
          docker build -t gro-built:1 ctx
          test "$(docker run --rm gro-built:1 cat /built)" = built-in-dind
          echo "docker build and run in DinD: ok"
"""


DIND_CONFIG = """\
runner:
  capacity: 1
container:
  # no registry: the job images are the ones the DinD image preloads
  force_pull: false
  valid_volumes:
    - /var/run/docker.sock
"""


ROOTLESS_CONFIG = """\
runner:
  capacity: 1
container:
  force_pull: false
  valid_volumes:
    - /run/user/1000/docker.sock
"""


# An HTTP/1.1 client in bash, enough for the cache API: ``req METHOD PATH [BODY] [HEADER]``
# sets $code and $body (ASCII bodies: the length is counted in characters).
HTTP = r"""
u=${CACHE#http://}; hp=${u%%/*}; HOST=${hp%:*}; PORT=${hp##*:}
fmt='%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n'
fmt+='Content-Type: application/json\r\nContent-Length: %s\r\nConnection: close\r\n%s\r\n%s'
req() {
  exec 3<>"/dev/tcp/$HOST/$PORT"
  local data=${3:-}
  printf "$fmt" "$1" "$2" "$hp" "$ACTIONS_RUNTIME_TOKEN" "${#data}" "${4:-}" "$data" >&3
  resp=$(cat <&3); exec 3<&-
  code=$(printf '%s' "$resp" | head -n 1 | cut -d' ' -f2)
  body=${resp#*$'\r\n\r\n'}
}
"""


def runner_config(real: Real, name: str, text: str) -> dict[str, Any]:
    manifests.apply(
        real.kube,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
         "data": {"config.yaml": text}},
        namespace=real.ns,
    )  # fmt: skip
    return {"configMapKeyRef": {"name": name, "key": "config.yaml"}}


def cache_pod_ip(real: Real, group: str) -> str:
    def ip() -> str | None:
        pods = real.kube.get(
            f"/api/v1/namespaces/{real.ns}/pods", labelSelector=f"gitea.bpg.pw/cache-of={group}"
        )["items"]
        ready = [
            p
            for p in pods
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (p.get("status") or {}).get("conditions") or []
            )
        ]
        return ready[0]["status"].get("podIP") if ready else None

    try:
        return str(wait_until(ip, timeout=180, what=f"group {group}'s cache server ready"))
    except TimeoutError:
        raise AssertionError(real.pods_report()) from None


# The modes a job probe runs in: the runner image, and the Docker socket the job drives.
PROBE_MODES: dict[str, dict[str, Any]] = {
    "host": {"image": images.RUNNER, "socket": ""},
    "dind": {"image": images.RUNNER, "socket": "/var/run/docker.sock"},
    "dind-rootless": {"image": images.ROOTLESS, "socket": "/run/user/1000/docker.sock"},
    # a daemon on a Unix socket: the runner mounts it into job containers itself
    "dind-userns": {"image": images.RUNNER, "socket": ""},
}
# A case name's suffix for ``shareProcessNamespace`` in the template.
SHARED = "-shared-pids"
# What the probe prints for the view from a ``--privileged`` container through the daemon.
PRIVILEGED_VIEW = r"via docker --privileged (-v /sys:/sys )?-v /:/host:"


def probe_group(
    real: Real,
    mode: str,
    label: str,
    *,
    shared: bool,
    cache: dict[str, Any] | None = None,
    aliases: list[dict[str, Any]] | None = None,
) -> None:
    """The group ``probe`` the credential suites run their probe job on: ``mode``'s runner
    image and, for the daemon modes, its runner config and (dind) sidecar; ``shared``: the
    Pod shares one PID namespace; ``aliases``: hostAliases (a cache's Service name)."""
    pod: dict[str, Any] = {"hostAliases": aliases} if aliases else {}
    if shared:
        pod["shareProcessNamespace"] = True
    spec: dict[str, Any] = {"image": LOCAL + PROBE_MODES[mode]["image"]}
    if cache is not None:
        spec["cache"] = cache
    if mode == "host":
        spec |= {"labels": [label], "template": on_real_node(**pod)}
    else:
        spec["labels"] = [f"{label}:docker://{LOCAL}{images.BUSYBOX_DOCKER}"]
        text = ROOTLESS_CONFIG if mode == "dind-rootless" else DIND_CONFIG
        spec["runnerConfig"] = runner_config(real, f"{label}-config", text)
        init = {"dind": [DIND_SIDECAR], "dind-userns": [USERNS_DAEMON]}.get(mode)
        spec["template"] = on_real_node(init=init, **pod)
    real.group("probe", mode=mode, maxActiveRunners=1, **spec)
