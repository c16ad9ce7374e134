"""Issue 34: no runner credential in a container that runs job code, or that runs the Docker
daemon jobs drive, in any mode, with a cache or without, with ``shareProcessNamespace`` or
without, for Gitea and for Forgejo.

What a job can reach of a Pod is what its containers carry: env (``secretKeyRef``) and
mounted Secrets. The registration token (which makes runners of any labels) may be in the
``gro-register`` init container alone: it runs to completion before the runner container
(and the daemon in ``dind-rootless``) starts. The API token is the operator's and reaches no
Pod. A Forgejo runner holds one credential, its own (the Secret named like its Job, good for
its one job); the group's tokens reach no Forgejo Pod at all.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from gitea_runner_operator.api.pod_template import REGISTER_CONTAINER
from gitea_runner_operator.api.runnergroup import InvalidSpec, parse_spec
from gitea_runner_operator.objects.forgejo_job import render_forgejo_job
from gitea_runner_operator.objects.job_template import render_runner_job
from tests.support.builders import VALID

TOKENS_SECRET = VALID["registrationToken"]["secretRef"]["name"]
JOB = "ci-0123abcd-bcdfg"
OWNED = {"group_name": "ci", "namespace": "team-a", "group_uid": "u1", "job_name": JOB}


def _spec(forge: str, mode: str, cache: bool, shared: bool) -> Any:
    raw: dict[str, Any] = {**VALID, "mode": mode}
    raw["labels"] = ["linux"] if mode == "host" else ["linux:docker://node:20"]
    if forge == "forgejo":
        raw["gitea"] = {"url": "https://forgejo.example/", "flavor": "forgejo"}
    if cache:
        raw["cache"] = {"enabled": True}
    if shared:
        raw["template"] = {"spec": {"shareProcessNamespace": True}}
    return parse_spec(raw)


def _cases() -> list[tuple[str, str, bool, bool]]:
    cases = []
    for case in itertools.product(
        ("gitea", "forgejo"), ("host", "dind", "dind-rootless"), (False, True), (False, True)
    ):
        try:
            _spec(*case)
        except InvalidSpec:
            # refused where it would widen a job's reach (shared PIDs with a cache in dind)
            continue
        cases.append(case)
    return cases


CASES = _cases()


def _pod(forge: str, mode: str, cache: bool, shared: bool) -> dict[str, Any]:
    spec = _spec(forge, mode, cache, shared)
    if forge == "forgejo":
        job = render_forgejo_job(spec=spec, ttl_seconds_after_finished=60, **OWNED)
    else:
        job = render_runner_job(spec=spec, **OWNED)
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


def _secrets_reached(pod: dict[str, Any], container: dict[str, Any]) -> set[str]:
    """The Secrets a container reads: by ``secretKeyRef``, ``envFrom`` or a mounted volume."""
    names = {
        e["valueFrom"]["secretKeyRef"]["name"]
        for e in container.get("env") or []
        if "secretKeyRef" in (e.get("valueFrom") or {})
    }
    names |= {s["secretRef"]["name"] for s in container.get("envFrom") or [] if "secretRef" in s}
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"], {})
        if "secret" in volume:
            names.add(volume["secret"]["secretName"])
        for source in (volume.get("projected") or {}).get("sources") or []:
            if "secret" in source:
                names.add(source["secret"]["name"])
    return names


def _long_running(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """Containers alive while a job runs: the regular ones and native sidecars (the DinD
    daemon, ``gro-config``)."""
    sidecars = [c for c in (pod.get("initContainers") or []) if c.get("restartPolicy") == "Always"]
    return [*pod["containers"], *sidecars]


def test_the_matrix_covers_every_mode_with_and_without_a_cache():
    modes = {(forge, mode, cache) for forge, mode, cache, _ in CASES}
    assert len(modes) == 12
    assert {(mode, cache) for _, mode, cache, shared in CASES if shared} >= {
        ("host", False), ("host", True), ("dind", False), ("dind-rootless", False),
        ("dind-rootless", True),
    }  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_no_container_alive_during_a_job_reads_the_groups_tokens(case):
    forge = case[0]
    pod = _pod(*case)
    for container in _long_running(pod):
        reached = _secrets_reached(pod, container)
        assert TOKENS_SECRET not in reached, (container["name"], reached)
        if forge == "forgejo" and container["name"] == "runner":
            # its own credential, named like its Job, for its one job
            assert reached <= {JOB}, reached
        elif container["name"] != "gro-config":
            # gro-config holds the cache's config Secret and hands it over once (issue 24)
            assert not reached, (container["name"], reached)
    text = json.dumps(pod)
    assert '"key": "api"' not in text  # the API token is the operator's alone


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_the_registration_token_is_in_gro_register_alone_and_it_ends_first(case):
    forge = case[0]
    pod = _pod(*case)
    holders = [
        c["name"]
        for c in [*(pod.get("initContainers") or []), *pod["containers"]]
        if TOKENS_SECRET in _secrets_reached(pod, c)
    ]
    if forge == "forgejo":
        assert holders == []  # registered through the API: the group's tokens reach no Pod
        return
    assert holders == [REGISTER_CONTAINER]
    register = next(c for c in pod["initContainers"] if c["name"] == REGISTER_CONTAINER)
    assert "restartPolicy" not in register  # a plain init container: done before the runner
    env = {e["name"]: e for e in register["env"]}
    token = env["GITEA_RUNNER_REGISTRATION_TOKEN"]
    assert "value" not in token and token["valueFrom"]["secretKeyRef"]["name"] == TOKENS_SECRET
