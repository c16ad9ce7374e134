"""Runner and job containers can run unprivileged: host mode under Pod Security
``restricted`` (the integration suite admits it on the testbed's API server:
``test_runner_pods.py::test_host_mode_runners_are_admitted_under_pod_security_restricted``)
and under OpenShift's ``restricted-v2`` SCC, which assigns each namespace a UID range and
refuses a fixed UID outside it: the template moves the UID and fsGroup into the range, and
everything else the SCC asks for is already there. OpenShift itself cannot run here; this
checks the rendered Pod against the SCC's rules as its documentation states them."""

from __future__ import annotations

import json

from gitea_runner_operator.api.template_policy import RESTRICTED, check
from tests.support.builders import container, job_for, pod_of

# A namespace's range, as OpenShift annotates it: openshift.io/sa.scc.uid-range=1000680000/10000
UID = 1000680000
OPENSHIFT = {
    "spec": {
        "securityContext": {"fsGroup": UID},
        "containers": [
            {"name": "runner", "securityContext": {"runAsUser": UID, "runAsGroup": UID}}
        ],
    }
}


def restricted_v2(pod: dict, low: int, size: int) -> list[str]:
    """What restricted-v2 would refuse in this Pod (its documented rules)."""
    problems = []
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            problems.append(field)
    if any("hostPath" in v for v in pod.get("volumes", [])):
        problems.append("hostPath")
    fs_group = (pod.get("securityContext") or {}).get("fsGroup")
    if fs_group is not None and not low <= fs_group < low + size:
        problems.append("fsGroup out of range")
    for c in [*pod.get("containers", []), *pod.get("initContainers", [])]:
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            problems.append(f"{c['name']}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{c['name']}: allowPrivilegeEscalation")
        if (sc.get("capabilities") or {}).get("drop") != ["ALL"]:
            problems.append(f"{c['name']}: capabilities not dropped")
        uid = sc.get("runAsUser")
        if uid is not None and not low <= uid < low + size:
            problems.append(f"{c['name']}: runAsUser out of range")
    return problems


def test_host_mode_runs_under_openshift_restricted_v2_with_the_uid_moved_into_range():
    assert check(OPENSHIFT, "host", RESTRICTED) is None  # the template policy lets it pass
    plain = pod_of(job_for(mode="host"))
    assert restricted_v2(plain, UID, 10000)  # the default uid 1000 is outside the range
    pod = pod_of(job_for(mode="host", template=OPENSHIFT))
    assert restricted_v2(pod, UID, 10000) == []
    runner = container(pod)
    assert runner["securityContext"]["runAsUser"] == UID
    assert runner["securityContext"]["runAsNonRoot"] is True
    assert "privileged" not in json.dumps(pod)
    # The registering init container runs with the runner's security context, so as well.
    (register,) = pod["initContainers"]
    assert register["securityContext"]["runAsUser"] == UID
