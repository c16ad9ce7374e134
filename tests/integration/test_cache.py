"""spec.cache on the testbed's real API server, controller-manager (Deployment, ReplicaSet,
PV binder, garbage collector) and kwok (which runs no container, so the cache server's own
behaviour is tested by the real-node suite and tests/integration/test_cache_server.py).

What a team would notice: the cache objects appear, owned by the group, admitted in a
namespace that enforces Pod Security ``restricted``; the group's status says the cache is
ready and names its Service; runner Jobs get the cache config only through a Secret volume;
the generated secret survives an operator restart and is never in a Job, status or Event;
deleting the group removes everything.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import yaml

from tests.support import manifests
from tests.support.builders import group as crd_group
from tests.support.testbed import (
    GROUPS,
    ONE_JOB,
    allow_cache,
    delete_namespace,
    group_uid,
    kwok_image,
    make_tokens,
    namespace_with_access,
    rejection,
    runner_group,
    runner_jobs,
    sample,
    unique,
    wait_until,
)
from tests.testbed.kube import KubeClient

pytestmark = pytest.mark.integration

OWNED = {
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments/{name}",
    "Service": "/api/v1/namespaces/{ns}/services/{name}",
    "PersistentVolumeClaim": "/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}",
    "Secret": "/api/v1/namespaces/{ns}/secrets/{name}",
}


@pytest.fixture
def volume(kube: KubeClient) -> Any:
    """A PersistentVolume of a class of its own: the testbed has no storage provisioner, so
    the claim binds to it as a claim binds to a pre-provisioned volume."""
    name = unique("gro-cache-pv")
    kube.post(
        "/api/v1/persistentvolumes",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": name,
                "persistentVolumeReclaimPolicy": "Delete",
                "hostPath": {"path": f"/tmp/{name}"},
            },
        },
    )
    yield name
    kube.delete(f"/api/v1/persistentvolumes/{name}")


def secret_data(kube: KubeClient, ns: str, name: str) -> dict[str, str]:
    data = kube.get(OWNED["Secret"].format(ns=ns, name=name))["data"]
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


def test_a_group_with_a_cache_owns_a_restricted_cache_server_and_its_runners_mount_the_config(
    kube, gitea, cluster, gitea_target, start_operator, kwok, volume
):
    ns = namespace_with_access(
        kube, unique("cache"), {"pod-security.kubernetes.io/enforce": "restricted"}
    )
    try:
        allow_cache(kube, ns)
        make_tokens(kube, ns, cluster, gitea_target)
        manifests.apply(
            kube,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "runner-config"},
                "data": {"config.yaml": "runner:\n  capacity: 1\ncontainer:\n  network: host\n"},
            },
            namespace=ns,
        )
        op = start_operator(ns)
        gitea.push_workflow(gitea_target.org, gitea_target.repo, "one.yml", ONE_JOB)
        gitea.wait_for_jobs(gitea_target.org, gitea_target.repo, "queued", count=1)
        group = runner_group(
            "ci",
            target=gitea_target,
            url=cluster.gitea_url,
            mode="host",
            image=kwok_image(600),
            runnerConfig={"configMapKeyRef": {"name": "runner-config", "key": "config.yaml"}},
            cache={"enabled": True, "size": "1Gi", "storageClassName": volume},
        )
        manifests.apply(kube, group, namespace=ns)
        uid = group_uid(kube, ns, "ci")

        objects = {
            kind: wait_until(
                lambda path=path: kube.exists(path) and kube.get(path),
                what=f"the cache {kind}",
            )
            for kind, path in ((k, p.format(ns=ns, name="ci-cache")) for k, p in OWNED.items())
        }
        for kind, obj in objects.items():
            refs = [(r["kind"], r["uid"]) for r in obj["metadata"]["ownerReferences"]]
            assert refs == [("RunnerGroup", uid)], kind

        # Admitted under `restricted` (kwok plays the kubelet: Ready proves admission) and
        # bound to the volume; the group's status says so and names the Service.
        status = wait_until(
            lambda: (
                (
                    (kube.get(f"{GROUPS.format(ns=ns)}/ci").get("status") or {}).get("cache") or {}
                ).get("ready")
                and kube.get(f"{GROUPS.format(ns=ns)}/ci")["status"]["cache"]
            ),
            timeout=90,
            what="status.cache.ready",
        )
        assert status["service"] == "ci-cache:8088"
        assert status["url"] == f"http://ci-cache.{ns}.svc:8088/"
        pvc = kube.get(OWNED["PersistentVolumeClaim"].format(ns=ns, name="ci-cache"))
        assert pvc["status"]["phase"] == "Bound" and pvc["spec"]["volumeName"] == volume
        pods = kube.get(f"/api/v1/namespaces/{ns}/pods", labelSelector="gitea.bpg.pw/cache-of=ci")[
            "items"
        ]
        assert len(pods) == 1
        container = pods[0]["spec"]["containers"][0]
        assert container["securityContext"]["allowPrivilegeEscalation"] is False

        # The runner config: the team's settings and the cache server, in the Secret only.
        values = secret_data(kube, ns, "ci-cache")
        generated = values["external-secret"]
        assert len(generated) >= 32
        config = yaml.safe_load(values["runner-config.yaml"])
        assert config["runner"] == {"capacity": 1}
        assert config["container"] == {"network": "host"}
        assert config["cache"]["external_server"] == status["url"]
        assert config["cache"]["external_secret"] == generated

        (job, *_) = wait_until(lambda: runner_jobs(kube, ns, "ci"), what="a runner Job")
        pod_spec = job["spec"]["template"]["spec"]
        (cfg_volume,) = [v for v in pod_spec["volumes"] if v["name"] == "gro-runner-config"]
        assert cfg_volume["secret"]["secretName"] == "ci-cache"
        assert generated not in json.dumps(job)
        group_now = kube.get(f"{GROUPS.format(ns=ns)}/ci")
        assert generated not in json.dumps(group_now)
        events = kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
        assert generated not in json.dumps(events)
        assert generated not in op.log()

        # A restarted operator keeps the secret (runners of before and after agree).
        op.stop()
        op2 = start_operator(ns)
        kube.patch(f"{GROUPS.format(ns=ns)}/ci", {"spec": {"cache": {"resources": {
            "requests": {"memory": "64Mi"}}}}})  # fmt: skip
        wait_until(
            lambda: kube.get(OWNED["Deployment"].format(ns=ns, name="ci-cache"))["spec"][
                "template"
            ]["spec"]["containers"][0].get("resources"),
            what="the resized cache Deployment",
        )
        assert secret_data(kube, ns, "ci-cache")["external-secret"] == generated
        assert generated not in op2.log()

        # Deleting the group removes the cache with it.
        kube.delete(f"{GROUPS.format(ns=ns)}/ci")
        for kind, path in OWNED.items():
            wait_until(
                lambda path=path: not kube.exists(path.format(ns=ns, name="ci-cache")),
                timeout=90,
                what=f"the cache {kind} garbage-collected",
            )
    finally:
        delete_namespace(kube, ns)


def test_a_team_that_did_not_allow_cache_secrets_is_told_so(
    kube, gitea, cluster, gitea_target, start_operator
):
    ns = namespace_with_access(kube, unique("nocache"), {})
    try:
        make_tokens(kube, ns, cluster, gitea_target)
        start_operator(ns)
        gitea.push_workflow(gitea_target.org, gitea_target.repo, "one.yml", ONE_JOB)
        gitea.wait_for_jobs(gitea_target.org, gitea_target.repo, "queued", count=1)
        group = runner_group(
            "ci",
            target=gitea_target,
            url=cluster.gitea_url,
            image=kwok_image(60),
            cache={"enabled": True, "persistent": False},
        )
        manifests.apply(kube, group, namespace=ns)
        cache = wait_until(
            lambda: (kube.get(f"{GROUPS.format(ns=ns)}/ci").get("status") or {}).get("cache"),
            what="status.cache",
        )
        assert cache["ready"] is False and cache["reason"] == "CacheRefused"
        assert "secrets" in cache["message"] and "forbidden" in cache["message"]
        events = kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
        assert any(e["reason"] == "CacheRefused" and e["type"] == "Warning" for e in events)
        # Runners would not find their config: none is started while the cache is refused.
        assert max(sample(6, lambda: len(runner_jobs(kube, ns, "ci")))) == 0
    finally:
        delete_namespace(kube, ns)


EXTERNAL = {"url": "http://cache.example:8088", "secretRef": {"name": "cache", "key": "secret"}}


@pytest.mark.parametrize(
    ("cache", "message"),
    [
        ({"enabled": True, "size": "ten"}, "spec.cache.size"),
        (
            {"enabled": True, "externalServer": EXTERNAL, "storageClassName": "fast"},
            "with externalServer the operator runs no cache server",
        ),
        ({"enabled": True, "externalServer": {**EXTERNAL, "url": "http://u:p@c"}}, "url"),
        ({"enabled": True, "resources": {"limits": {"memory": "lots"}}}, "spec.cache.resources"),
    ],
)
def test_the_crd_refuses_a_cache_the_operator_could_not_run(kube, team_namespace, cache, message):
    assert message in rejection(kube, team_namespace, crd_group("bad", cache=cache))


def test_the_crd_fills_in_the_cache_defaults(kube, team_namespace):
    created = kube.post(GROUPS.format(ns=team_namespace), crd_group("ok", cache={"enabled": True}))
    assert created["spec"]["cache"] == {"enabled": True, "size": "10Gi", "persistent": True}
