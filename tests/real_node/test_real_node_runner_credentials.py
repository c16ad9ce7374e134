"""Issue 34 on the real node: a job tries every way to read the group's registration token,
in every mode without a cache (with a cache: test_real_node_cache_secret.py, whose probe looks
for the token too), with ``shareProcessNamespace`` and without, and fails; the job still runs
and succeeds.

The token makes runners of any labels for the whole scope, so whoever holds it receives other
repositories' jobs and their secrets. Until issue 34, ``dind`` and ``dind-rootless`` groups
without a cache gave it to the runner container, and in ``dind-rootless`` the Docker daemon
jobs drive runs in that container: a job read it from dockerd's ``/proc/<pid>/environ`` with
``docker run --privileged -v /sys:/sys -v /:/host``. Now ``gro-register`` registers in every
mode and ends before the runner container starts.

What a job tries (tests/support/job_probe.py): its own environment and ``/proc`` (every
process's environment, the runner's memory, descriptors, root and working directory), the
files a runner keeps (``/data/.runner`` among the small, named places searched), and with
Docker the same through the daemon: ``-v /:/host`` (the daemon's files and ``/proc``),
``--pid=host``, each with ``--privileged`` and ``--privileged -v /sys:/sys`` where the daemon
grants it. The oracle is the token itself, read by the test from the Secret, looked for in
the whole job log. A control reads a process of the job's own (memory, environment) and must
find its marker.
"""

from __future__ import annotations

import re

import pytest

from tests.support.job_probe import container_workflow, host_workflow, probe, registration_token
from tests.support.real_node import (
    PRIVILEGED_VIEW,
    PROBE_MODES,
    SHARED,
    probe_group,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.real_node]

CASES = [*PROBE_MODES, *(f"{mode}{SHARED}" for mode in PROBE_MODES)]


STILL_RUNS = """\
      - run: echo "JOB STILL RUNS"
"""


@pytest.mark.parametrize("case", CASES)
def test_a_job_cannot_read_the_registration_token_and_still_runs(real, case):
    mode = case.removesuffix(SHARED)
    shared = mode != case
    label = f"gro-token-{mode}"
    probe_group(real, mode, label, shared=shared)
    token = real.target.registration_token
    probe_text = probe(registration_token(token))
    if mode == "host":
        workflow = host_workflow("token-host", label, probe_text, STILL_RUNS)
    else:
        socket = PROBE_MODES[mode]["socket"]
        workflow = container_workflow(f"token-{label}", label, socket, probe_text, STILL_RUNS)
    real.push("token.yml", workflow)
    done = real.wait_done({"probe"}, timeout=420)
    log = real.job_log("probe")
    probes = "\n".join(line for line in log.splitlines() if "PROBE" in line and "echo" not in line)
    print(f"\n--- {case}: what the job could reach\n{probes}")
    assert done == {"probe": "success"}, real.failed_job_report(log)
    assert "JOB STILL RUNS" in log
    # the oracle: the token, read from the Secret, is nowhere in what the job printed
    assert token not in log, f"the job read the registration token:\n{probes}"
    # the probe could read where it ran: a denial is the defence, not a broken probe
    assert "PROBE control memory: readable, found: gro-control-marker" in log, probes
    assert "PROBE control environ: gro-control-env-1" in log, probes
    # the job's own environment, and every one its own /proc shows, were searched: no token
    assert re.search(r"PROBE own environment: [1-9]\d* entries, hits:[ \t\r]*$", log, re.M), probes
    assert re.search(r"PROBE environs: [1-9]\d* processes, \d+ not readable, hits: none", log)
    if mode == "host":
        # steps run in the runner container, same user: the runner is right there, and what
        # it holds is its own registration (/data/.runner), good for this one job
        assert re.search(r"PROBE runner process: pid \d+", log), probes
        assert re.search(r"PROBE state file /data/\.runner: readable", log), probes
    else:
        # what the daemon showed: its /proc under -v /:/host, every environment searched
        assert re.search(r"via docker .*-v /:/host: environs: [1-9]\d* processes", log), probes
        assert "hits: [" not in log, probes
    if mode == "dind-rootless":
        # the daemon runs in the runner's container: through its /proc a job sees the runner
        # and the daemon (whose environment held the token until issue 34)
        assert re.search(PRIVILEGED_VIEW + r" runner process: pid \d+", log), probes
        assert re.search(PRIVILEGED_VIEW + r" environs: [1-9]\d* processes", log), probes
    pods = real.pods("probe")
    runner = next(c for c in pods[0]["spec"]["containers"] if c["name"] == "runner")
    assert not [e for e in runner.get("env", []) if "TOKEN" in e["name"]]
    statuses = {c["name"]: c for c in pods[0]["status"].get("initContainerStatuses") or []}
    assert statuses["gro-register"]["state"]["terminated"]["exitCode"] == 0
