"""Builders of the objects tests feed the package: a valid RunnerGroup spec and variants of
it, the RunnerGroup object of that spec, runner Jobs and their Pods as the package renders
them, and a CA certificate. One definition each, shared by the unit and testbed suites."""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Mapping
from typing import Any

from gitea_runner_operator.api.gitea import ActionJob
from gitea_runner_operator.api.runnergroup import parse_spec
from gitea_runner_operator.objects.job_template import render_runner_job

VALID = {
    "scope": "repo",
    "org": "acme",
    "repo": "widgets",
    "gitea": {"url": "https://gitea.example.com/"},
    "labels": ["ubuntu-latest:docker://node:20-bookworm", "app-infra"],
    "maxActiveRunners": 3,
    "registrationToken": {"secretRef": {"name": "runner-secrets", "key": "registration"}},
    "authToken": {"secretRef": {"name": "runner-secrets", "key": "api"}},
}


def spec_with(**changes):
    raw = copy.deepcopy(VALID)
    for key, value in changes.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    return raw


TOKEN_REF = {"secretKeyRef": {"name": "runner-secrets", "key": "registration"}}


def job_for(**changes):
    return render_runner_job(
        group_name="ci",
        namespace="team-a",
        group_uid="uid-1",
        spec=parse_spec(spec_with(**changes)),
        job_name="ci-0123abcd-bcdfg",
    )


def pod_of(job):
    return job["spec"]["template"]["spec"]


def container(pod, name="runner", field="containers"):
    (found,) = [c for c in pod.get(field, []) if c["name"] == name]
    return found


REALISTIC = {
    "metadata": {"labels": {"team": "a"}, "annotations": {"example.com/cost": "ci"}},
    "spec": {
        "nodeSelector": {"ci": "true"},
        "tolerations": [{"key": "ci", "operator": "Exists", "effect": "NoSchedule"}],
        "priorityClassName": "ci",
        "imagePullSecrets": [{"name": "registry"}],
        "runtimeClassName": "gvisor",
        "serviceAccountName": "runner",
        "terminationGracePeriodSeconds": 120,
        "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["gitea.internal"]}],
        "containers": [
            {
                "name": "runner",
                "resources": {"limits": {"cpu": "2", "memory": "4Gi"}},
                "env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
                "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
            },
            {"name": "cache-proxy", "image": "example/cache:1"},
        ],
        "initContainers": [{"name": "warm", "image": "busybox", "command": ["true"]}],
        "volumes": [{"name": "cache", "emptyDir": {"sizeLimit": "10Gi"}}],
    },
}


# A throwaway self-signed test CA (its key was discarded when it was made).
TEST_CA = """-----BEGIN CERTIFICATE-----
MIIBgzCCASmgAwIBAgIUFqMXcLHnx+3KpwZoAGiIA7HiTTcwCgYIKoZIzj0EAwIw
FjEUMBIGA1UEAwwLZ3JvIHRlc3QgQ0EwIBcNMjYxMTIyMTIxOTMzWhgPMjEyNjEw
MjkxMjE5MzNaMBYxFDASBgNVBAMMC2dybyB0ZXN0IENBMFkwEwYHKoZIzj0CAQYI
KoZIzj0DAQcDQgAEiF+3pNPqYhrwiZR6q22FD2kQM8/LeJXiChUj9ub0HehXxlli
cY3sPo7IaNaINuLGcMH/efSdXDWeDwJqHprTkKNTMFEwHQYDVR0OBBYEFPD6zS6E
bcTYBBlF704ZmS4RUDyhMB8GA1UdIwQYMBaAFPD6zS6EbcTYBBlF704ZmS4RUDyh
MA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIhAPp7Spc8waEINgw5
EvspcUWF7Kh7fK8R6AFL6eWsqz1mAiBJUmtKygQf3Ug+V/hvrY+xPy/JXR+lm3f5
Ua5hVp4vaw==
-----END CERTIFICATE-----
"""


def group(name: str, **spec: Any) -> dict[str, Any]:
    """A RunnerGroup whose spec is the unit tests' valid one, with ``spec`` changes (None
    removes a field)."""
    return group_object(name, spec_with(**spec))


def group_object(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The RunnerGroup object named ``name`` around ``spec``, as a user applies it."""
    return {
        "apiVersion": "gitea.bpg.pw/v1alpha1",
        "kind": "RunnerGroup",
        "metadata": {"name": name},
        "spec": spec,
    }


def workflow(name: str, jobs: Mapping[str, str], needs: Mapping[str, str] | None = None) -> str:
    """A workflow run on push whose jobs (job name -> its ``runs-on`` label) each echo their
    name, and ``needs`` (job -> the job it waits for): what the testbed suites queue when only
    the jobs' labels and order matter."""
    lines = [f"name: {name}", "on: [push]", "jobs:"]
    for job, label in jobs.items():
        after = f", needs: [{needs[job]}]" if needs and job in needs else ""
        lines.append(f"  {job}: {{runs-on: {label}{after}, steps: [{{run: echo {job}}}]}}")
    return "\n".join(lines) + "\n"


def queued_job(
    job_id: int,
    repo: str = "acme/app",
    labels: tuple[str, ...] = ("linux",),
    *,
    url: str = "https://gitea.example.com",
    created_at: dt.datetime | None = None,
) -> ActionJob:
    """A job Gitea lists as queued in ``repo``, with its API URL (where the operator reads
    the repository from)."""
    return ActionJob(
        id=job_id,
        labels=labels,
        status="queued",
        url=f"{url}/api/v1/repos/{repo}/actions/jobs/{job_id}",
        created_at=created_at,
    )
