"""The Docker daemon of a ``dind-userns`` runner Pod: no privileged container, the Pod in its
own user namespace.

Why this shape (docs/decisions/0006-docker-in-a-user-namespace.md, each part tried on the
real node):

- ``hostUsers: false``: root and every capability in the Pod count only in the Pod's user
  namespace; on the node its processes are a per-Pod range of 65,536 unprivileged uids.
- The daemon runs as a native sidecar, as ``root`` of that namespace with the default
  capabilities only. rootlesskit gives it a nested user namespace in which it holds every
  capability over its own mounts and network, mapping the Pod's ids one to one (``root``'s
  subordinate ids, written by the script below). Only root of the Pod may map more than its
  own id there: a setuid ``newuidmap`` run by another user lacks ``CAP_SYS_ADMIN`` over the
  new namespace, and mapping the Pod's uid 0 needs ``CAP_SETFCAP``.
- ``procMount: Unmasked``: the daemon mounts a fresh ``/proc`` for each container, which the
  kernel allows only where ``/proc`` is fully visible. Pod Security ``baseline`` admits it
  for Pods with ``hostUsers: false`` (policy version 1.35 and later).
- The daemon's network is its own namespace, joined to the Pod's by slirp4netns (or vpnkit)
  through ``/dev/net/tun``, which the Pod's RuntimeClass gives it (an unprivileged Pod has no
  device otherwise). Jobs get Docker's usual bridge networks, service containers by name and
  ``docker build`` with network access. A daemon in the Pod's own network namespace would
  need ``CAP_NET_ADMIN`` there, which ``baseline`` refuses.
- The runner container talks to it over a Unix socket in a shared in-memory volume, so no
  TCP port, no TLS certificates, and the runner container itself runs as ``restricted``
  asks (uid 1000, no capabilities).

Pure: dicts in, dicts out.
"""

from __future__ import annotations

from typing import Any, Final

from gitea_runner_operator.api import constants

CONTAINER: Final = "dockerd"
SOCKET_VOLUME: Final = "gro-docker-socket"
STORAGE_VOLUME: Final = "gro-dind-storage"
SOCKET_DIR: Final = "/run/gro-docker"
SOCKET: Final = f"{SOCKET_DIR}/docker.sock"
# The group the socket belongs to, which the Pod's fsGroup gives every container of it.
SOCKET_GID: Final = 1000
DATA_ROOT: Final = "/var/lib/docker"

# As root of the Pod's user namespace: refuse to start where that is not what it is (the
# API server dropped hostUsers), say what is missing in the termination message (the
# operator shows it in the group's RunnersHealthy condition), then rootlesskit and dockerd.
# /run/docker.sock is linked in the daemon's own mount namespace, so a job that mounts the
# usual path (-v /var/run/docker.sock:...) gets this daemon.
DAEMON_SCRIPT: Final = f"""\
set -eu
fail() {{ echo "$*" >&2; echo "$*" >/dev/termination-log 2>/dev/null || true; exit 1; }}
read -r _ host _ </proc/self/uid_map
[ "$host" != 0 ] || fail "dind-userns: the runner Pod is in the node's user namespace \
(spec.hostUsers was dropped): the cluster does not support user namespaces for Pods; \
choose mode dind or dind-rootless explicitly"
[ -c /dev/net/tun ] || fail "dind-userns: no /dev/net/tun in the runner Pod: its \
RuntimeClass must provide it (see docs/runners.md, dind-userns)"
echo root:1:65535 >/etc/subuid
echo root:1:65535 >/etc/subgid
export XDG_RUNTIME_DIR=/run/user/0
mkdir -p "$XDG_RUNTIME_DIR"
net=slirp4netns
command -v slirp4netns >/dev/null || net=vpnkit
exec rootlesskit --net="$net" --mtu=65520 --disable-host-loopback --port-driver=none \\
  --slirp4netns-sandbox=false --slirp4netns-seccomp=false \\
  --copy-up=/etc --copy-up=/run --propagation=rslave --state-dir=/run/rootlesskit \\
  sh -c 'ln -sf {SOCKET} /run/docker.sock && exec dockerd "$@"' dockerd \\
  --host=unix://{SOCKET} --group={SOCKET_GID} --data-root={DATA_ROOT}
"""


def daemon_sidecar() -> dict[str, Any]:
    """The daemon as a native sidecar: started (and answering) before the runner, stopped
    once the runner exits, so the Pod still completes."""
    return {
        "name": CONTAINER,
        "image": constants.USERNS_DAEMON_IMAGE,
        "restartPolicy": "Always",
        "command": ["/bin/sh", "-c", DAEMON_SCRIPT],
        "securityContext": {
            "runAsUser": 0,
            "runAsGroup": 0,
            "runAsNonRoot": False,
            "procMount": "Unmasked",
        },
        "volumeMounts": [
            {"name": SOCKET_VOLUME, "mountPath": SOCKET_DIR},
            {"name": STORAGE_VOLUME, "mountPath": DATA_ROOT},
        ],
        "startupProbe": {
            "exec": {"command": ["docker", "-H", f"unix://{SOCKET}", "info"]},
            "periodSeconds": 2,
            "failureThreshold": 90,
        },
    }


def volumes() -> list[dict[str, Any]]:
    return [
        {"name": SOCKET_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
        {"name": STORAGE_VOLUME, "emptyDir": {}},
    ]


def runner_mount() -> dict[str, Any]:
    return {"name": SOCKET_VOLUME, "mountPath": SOCKET_DIR}


def runner_env() -> list[dict[str, Any]]:
    return [{"name": "DOCKER_HOST", "value": f"unix://{SOCKET}"}]
