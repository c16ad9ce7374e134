"""Hand the runner its cache config once, so that job code never reads the cache's secret.

With ``spec.cache`` the runner's config carries ``cache.external_secret``, which mints cache
tokens for any repository. The runner reads its config once, at start, before it asks for a
job; after that nothing in the runner container may read it: in ``host`` mode the steps run
there as the runner's own user, in ``dind-rootless`` so does the Docker daemon that the jobs
drive. So the runner Pod never mounts the config Secret into the runner container:

- the init container ``gro-register`` (every mode, when the group has a cache) registers
  with the Secret mounted, before anything of a job exists;
- the native sidecar ``gro-config`` mounts the Secret and, in an in-memory emptyDir shared
  with the runner, makes ``$CONFIG_FILE`` a FIFO. Opening it for reading is what the runner
  does first; the sidecar then unlinks it and writes the config into the pipe, so exactly
  one reader ever gets it, and the path is gone before the runner takes a job. A marker in
  a volume of its own keeps a restarted sidecar from making a second one;
- the same sidecar copies the runner binary, mode 0711 and owned by its own user, into a
  directory first on the runner's ``PATH``: the kernel marks a process whose executable its
  user cannot read non-dumpable, so steps (same uid, no ``CAP_SYS_PTRACE``) cannot read the
  runner's memory, environment or descriptors through ``/proc``, on a node without Yama too.

Nothing here changes the runner: it works for any runner whose entrypoint finds its binary
by name and reads ``$CONFIG_FILE`` once (the official image's ``run.sh`` and the testbed's).
Pure: dicts in, dicts out.
"""

from __future__ import annotations

from typing import Any, Final

from gitea_runner_operator.api.pod_template import HANDOFF_CONTAINER
from gitea_runner_operator.objects.security import restricted_container_security

# The operator's Secret: mounted by gro-register and gro-config only.
SECRET_VOLUME: Final = "gro-runner-config"  # noqa: S105 - a volume name
HANDOFF_VOLUME: Final = "gro-config-handoff"  # the FIFO, shared with the runner (read-only)
STATE_VOLUME: Final = "gro-config-state"  # the sidecar's own: "delivered" survives its restarts
BIN_VOLUME: Final = "gro-runner-bin"  # the unreadable copy of the runner binary
# A user of its own: not the runner's (1000), not root, so the runner can run but not read
# the copied binary, and a step cannot reach the sidecar's files through /proc.
HANDOFF_UID: Final = 65532
BIN_DIR: Final = "/etc/gitea-runner-operator/bin"
# The directories of the official images, after ours.
DEFAULT_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_SIDE = "/gro"  # the sidecar's own mount points

HANDOFF_SCRIPT: Final = f"""\
set -eu
trap 'exit 0' TERM INT
deliver() {{
  for name in gitea-runner act_runner forgejo-runner; do
    src=$(command -v "$name") || continue
    cp "$src" "{_SIDE}/bin/.$name" && chmod 0711 "{_SIDE}/bin/.$name"
    mv -f "{_SIDE}/bin/.$name" "{_SIDE}/bin/$name"
  done
  fifo={_SIDE}/handoff/config.yaml
  rm -f "$fifo"
  mkfifo -m 0644 "$fifo"  # the owner writes, the runner reads
  exec 3>"$fifo"  # waits for the first reader: the runner, loading its config
  : >{_SIDE}/state/delivered
  rm -f "$fifo"
  cat {_SIDE}/secret/config.yaml >&3
  exec 3>&-
}}
if [ ! -e {_SIDE}/state/delivered ]; then deliver & fi
while :; do sleep 3600 & wait $! || true; done
"""


def handoff_volumes(secret_volume: dict[str, Any]) -> list[dict[str, Any]]:
    """The Pod's volumes for the hand-off: the Secret (mounted by the init containers only)
    and three emptyDirs; the two that hold config bytes live in memory."""
    memory = {"medium": "Memory", "sizeLimit": "1Mi"}
    return [
        secret_volume,
        {"name": HANDOFF_VOLUME, "emptyDir": dict(memory)},
        {"name": STATE_VOLUME, "emptyDir": dict(memory)},
        {"name": BIN_VOLUME, "emptyDir": {"sizeLimit": "512Mi"}},
    ]


def runner_mounts(config_dir: str) -> list[dict[str, Any]]:
    """The runner container's view: the FIFO's directory at the config path, and the binary."""
    return [
        {"name": HANDOFF_VOLUME, "mountPath": config_dir, "readOnly": True},
        {"name": BIN_VOLUME, "mountPath": BIN_DIR, "readOnly": True},
    ]


def runner_path(env: list[dict[str, Any]]) -> dict[str, Any]:
    """``PATH`` with the copied binary's directory first (kept first if a template set it)."""
    given = next((e for e in env if e.get("name") == "PATH" and "value" in e), None)
    rest = str(given["value"]) if given is not None else DEFAULT_PATH
    parts = [p for p in rest.split(":") if p and p != BIN_DIR]
    return {"name": "PATH", "value": ":".join([BIN_DIR, *parts])}


def with_secret_config(container: dict[str, Any], config_dir: str) -> dict[str, Any]:
    """``gro-register`` as built from the runner container, with the Secret itself at the
    config path (it runs to completion before any job exists) and without the hand-off."""
    mounts = [
        m
        for m in container.get("volumeMounts", [])
        if m.get("name") not in (HANDOFF_VOLUME, BIN_VOLUME) and m.get("mountPath") != config_dir
    ]
    mounts.append({"name": SECRET_VOLUME, "mountPath": config_dir, "readOnly": True})
    return {**container, "volumeMounts": mounts}


def handoff_sidecar(image: str, pull_policy: str | None) -> dict[str, Any]:
    """The native sidecar that hands the config over (see the module docstring). It starts,
    and has made the FIFO, before the runner container starts (its startup probe)."""
    container: dict[str, Any] = {
        "name": HANDOFF_CONTAINER,
        "image": image,
        "restartPolicy": "Always",
        "command": ["/bin/sh", "-c", HANDOFF_SCRIPT],
        "securityContext": restricted_container_security(HANDOFF_UID, read_only_root=True),
        "volumeMounts": [
            {"name": SECRET_VOLUME, "mountPath": f"{_SIDE}/secret", "readOnly": True},
            {"name": HANDOFF_VOLUME, "mountPath": f"{_SIDE}/handoff"},
            {"name": STATE_VOLUME, "mountPath": f"{_SIDE}/state"},
            {"name": BIN_VOLUME, "mountPath": f"{_SIDE}/bin"},
        ],
        "startupProbe": {
            "exec": {
                "command": [
                    "/bin/sh",
                    "-c",
                    f"test -p {_SIDE}/handoff/config.yaml || test -e {_SIDE}/state/delivered",
                ]
            },
            "periodSeconds": 1,
            "failureThreshold": 120,
        },
    }
    if pull_policy:
        container["imagePullPolicy"] = pull_policy
    return container
