"""Issue 24 on the real node: a job of a cache group tries to read the cache server's secret
(``cache.external_secret`` of the runner's config), in every mode, and fails; the cache
still works for it (a save, then a restore that hits).

What a job tries, where it runs (each way bounded in time and bytes, see
``tests/support/job_probe.py``), for the cache secret and (issue 34) the registration token:

- the config's paths: ``$CONFIG_FILE`` and the config directory (the hand-off's FIFO), the
  sidecar's Secret mount (``/gro/secret``), the kubelet's copy of Secret volumes; then the
  regular files of ``/etc``, ``/data``, ``/tmp``, ``/run``, ``/home``, ``/root`` and a few
  more named places that hold an ``external_secret:`` line;
- ``/proc`` of the runner process and of the ``gro-config`` sidecar, found by name: their
  memory (whether it opens at all, then its small writable mappings searched for
  ``external_secret``), environment, descriptors (listed and read), root and working
  directory. A control reads a process of the job's own the same way and must find its
  marker, so a probe that cannot read anything cannot pass for a defence;
- with Docker (``dind``, ``dind-rootless``): the same through the daemon the job drives:
  ``-v`` of the config directory, ``docker run -v /:/host`` (the files, and the processes
  under the daemon's ``/proc``), and ``--pid=host``, with ``--privileged`` where the daemon
  grants it. The rootless daemon refuses ``--pid=host`` (its user namespace may not mount a
  ``/proc`` of the PID namespace it shares); its ``/proc`` under ``-v /:/host`` (from a
  ``--privileged`` container) shows the runner all the same.

``host`` mode runs the probe in its step (the runner container, the runner's own user).
The container modes run it in the job's container and through the daemon. ``host`` and
``dind-rootless`` run once more with ``shareProcessNamespace`` (refused with a cache in
``dind``), so that ``gro-config`` is in the job's sight and each of its doors is tried.
The oracle is the secret itself, read by the test from the operator's Secret: it appears
in no job log.

As in test_real_node_cache.py, ``hostAliases`` stand in for cluster DNS (the runner reaches
the cache Service by name); the containers of the DinD modes reach the cache Pod by IP.
"""

from __future__ import annotations

import base64
import re

import pytest

from gitea_runner_operator.api.cache import service_host
from gitea_runner_operator.objects import config_handoff
from tests.support.job_probe import (
    cache_secret,
    container_workflow,
    host_workflow,
    probe,
    registration_token,
    step,
)
from tests.support.real_node import (
    HTTP,
    PRIVILEGED_VIEW,
    PROBE_MODES,
    SHARED,
    cache_pod_ip,
    probe_group,
)
from tests.support.testbed import allow_cache

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.real_node]

# The cache API as actions/cache speaks it, over busybox's nc (the DinD jobs' image has
# neither bash nor curl): ``req METHOD PATH [BODY] [HEADER]`` sets $code and $body.
NC_HTTP = r"""
HP=${CACHE#http://}; HP=${HP%%/*}; HOST=${HP%:*}; PORT=${HP##*:}
req() {
  data=${3:-}; extra=${4:-X-Probe: 1}
  fmt='%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n'
  fmt="$fmt"'Content-Type: application/json\r\nContent-Length: %s\r\n'
  fmt="$fmt"'Connection: close\r\n%s\r\n\r\n%s'
  printf "$fmt" "$1" "$2" "$HP" "$ACTIONS_RUNTIME_TOKEN" "${#data}" "$extra" "$data" |
    nc "$HOST" "$PORT" > /tmp/resp
  code=$(head -n 1 /tmp/resp | cut -d' ' -f2)
  body=$(tr -d '\r' < /tmp/resp | sed '1,/^$/d')
}
"""

SAVE_RESTORE = r"""
payload="probe-$GITHUB_RUN_ID"
req POST /_apis/artifactcache/caches '{"key":"secret-probe","version":"v1"}'
echo "reserve: $code"; test "$code" = 200
id=$(printf '%s' "$body" | grep -o '"cacheId":[0-9]*' | cut -d: -f2)
range="Content-Range: bytes 0-$(( ${#payload} - 1 ))/*"
req PATCH /_apis/artifactcache/caches/$id "$payload" "$range"
echo "upload: $code"; test "$code" = 200
req POST /_apis/artifactcache/caches/$id
echo "commit: $code"; test "$code" = 200
req GET "/_apis/artifactcache/cache?keys=secret-probe&version=v1"
echo "lookup: $code"; test "$code" = 200
loc=$(printf '%s' "$body" | grep -o '"archiveLocation":"[^"]*"' | cut -d'"' -f4)
loc=$(printf '%s' "$loc" | sed 's/\\u0026/\&/g')
req GET "/${loc#http://*/}"
test "$code" = 200
test "$body" = "$payload"
echo "CACHE HIT $body"
"""


def host_steps() -> str:
    # bash's /dev/tcp client from the cache test (the runner image has no nc); its ``req``
    # takes the extra header with its own CRLF
    save = SAVE_RESTORE.replace('"$range"', "\"$range\"$'\\r\\n'")
    return f"""\
      - run: |
          set -eu
          CACHE=$ACTIONS_CACHE_URL
          {step(HTTP)}
          {step(save)}
"""


def container_steps(cache_url: str) -> str:
    return f"""\
      - run: |
          set -eu
          CACHE={cache_url}
          {step(NC_HTTP)}
          {step(SAVE_RESTORE)}
"""


# The same with ``shareProcessNamespace`` in the template, where the operator allows it with a
# cache (not in dind: api/cache.py): gro-config's processes, which hold the Secret's mount,
# are then in the job's reach, and the probe tries each of their doors.
CASES = [*PROBE_MODES, f"host{SHARED}", f"dind-rootless{SHARED}"]


@pytest.mark.parametrize("case", CASES)
def test_a_job_cannot_read_the_cache_secret_and_its_cache_still_hits(real, case):
    mode = case.removesuffix(SHARED)
    shared = mode != case
    allow_cache(real.kube, real.ns)
    label = f"gro-secret-{mode}"
    cache = {"enabled": True, "persistent": False, "size": "256Mi"}
    probe_group(real, mode, label, shared=shared, cache=cache)
    ip = cache_pod_ip(real, "probe")
    aliases = [{"ip": ip, "hostnames": [service_host("probe", real.ns)]}]
    probe_group(real, mode, label, shared=shared, cache=cache, aliases=aliases)

    real.wait_cache_settled("probe")
    secret = real.kube.get(f"/api/v1/namespaces/{real.ns}/secrets/probe-cache")["data"]
    value = base64.b64decode(secret["external-secret"]).decode()
    # the registration token too (issue 34): gro-register registers with a cache as without
    token = real.target.registration_token
    probe_text = probe(cache_secret(value), registration_token(token))
    if mode == "host":
        workflow = host_workflow("secret-host", label, probe_text, host_steps())
    else:
        url = f"http://{ip}:8088/"
        socket = PROBE_MODES[mode]["socket"]
        workflow = container_workflow(
            f"secret-{label}", label, socket, probe_text, container_steps(url)
        )
    real.push("secret.yml", workflow)
    done = real.wait_done({"probe"}, timeout=420)
    log = real.job_log("probe")
    probes = "\n".join(line for line in log.splitlines() if "PROBE" in line and "echo" not in line)
    print(f"\n--- {case}: what the job could reach\n{probes}")
    assert done == {"probe": "success"}, real.failed_job_report(log)
    assert value not in log, f"the job read the cache secret:\n{probes}"
    assert token not in log, f"the job read the registration token:\n{probes}"
    assert "CACHE HIT probe-" in log  # the runner still registered the job's token
    # the probe could read memory where it ran: a denial is the defence, not a broken probe
    assert "PROBE control memory: readable, found: gro-control-marker" in log, probes
    # wherever a probe saw the runner or the sidecar, their memory did not even open
    assert not re.search(r"(runner|gro-config) mem: readable", log), probes
    if mode == "host":
        # the runner is right there, same user: its memory, environment, descriptors are shut
        assert re.search(r"PROBE runner process: pid \d+", log), probes
        assert "PROBE runner mem: not readable" in log, probes
        assert re.search(r"PROBE file \S+/config\.yaml: cat: .*No such file", log), probes
    if mode == "dind-rootless":
        # the daemon runs in the runner's container: through its /proc (``-v /:/host``) a job
        # sees the runner process itself, and none of its doors opens
        assert re.search(PRIVILEGED_VIEW + r" runner process: pid \d+", log), probes
        assert re.search(PRIVILEGED_VIEW + r" runner mem: not readable", log), probes
    if shared:
        # the sidecar, another user, is in sight: from the step's own /proc in host mode, from
        # the daemon's in dind-rootless; nothing of it opens
        where = "PROBE" if mode == "host" else PRIVILEGED_VIEW
        assert re.search(where + r" gro-config process: pid \d+", log), probes
        assert re.search(where + r" gro-config mem: not readable", log), probes
        assert re.search(where + r" gro-config root: .*Permission denied", log), probes
    pods = real.pods("probe")
    sidecar = next(
        s
        for p in pods
        for s in p["status"].get("initContainerStatuses") or []
        if s["name"] == "gro-config"
    )
    assert sidecar["restartCount"] == 0
    runner = next(c for c in pods[0]["spec"]["containers"] if c["name"] == "runner")
    assert {m["name"] for m in runner["volumeMounts"]} >= {config_handoff.HANDOFF_VOLUME}
    assert config_handoff.SECRET_VOLUME not in {m["name"] for m in runner["volumeMounts"]}
