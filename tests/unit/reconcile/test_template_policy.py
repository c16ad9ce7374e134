"""The template policy the platform owns, field by field: each thing a tenant's template can
ask for that would reach past its runner Pod (the node, another identity, another team's
Secret) is refused by default with a condition naming the field, and allowed only when the
platform says so."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from aioresponses import aioresponses

from gitea_runner_operator.api.observation import Problem, ProblemKind
from gitea_runner_operator.api.runnergroup import parse_spec
from gitea_runner_operator.api.template_policy import (
    MAX_TEMPLATE_SECRETS,
    PERMISSIVE,
    RESTRICTED,
    PolicyError,
    TemplatePolicy,
    check,
    secret_refs,
)
from gitea_runner_operator.forge.client import SessionPool
from gitea_runner_operator.kube.secret_store import SecretStore
from gitea_runner_operator.kube.secrets import SecretProblem, Secrets
from gitea_runner_operator.poll.observer import Observer
from gitea_runner_operator.reconcile.expectations import Expectations
from gitea_runner_operator.reconcile.reconciler import Reconciler
from tests.support.builders import VALID
from tests.support.fake_cluster import KEY, Clock, FakeCache, FakeCluster, FakeSources, snapshot
from tests.support.gitea_answers import ORG_SPEC, FakeSecrets, gitea


def pod(**spec: Any) -> dict[str, Any]:
    return {"spec": spec}


def runner(**security: Any) -> dict[str, Any]:
    return {"name": "runner", "securityContext": security}


CASES = [
    (pod(hostNetwork=True), "spec.template.spec.hostNetwork", "hostNamespaces"),
    (pod(hostPID=True), "spec.template.spec.hostPID", "hostNamespaces"),
    (pod(hostIPC=True), "spec.template.spec.hostIPC", "hostNamespaces"),
    (
        pod(volumes=[{"name": "d", "emptyDir": {}}, {"name": "root", "hostPath": {"path": "/"}}]),
        "spec.template.spec.volumes[1].hostPath",
        "hostPath",
    ),
    (pod(nodeName="node-1"), "spec.template.spec.nodeName", "nodeName"),
    (
        pod(tolerations=[{"key": "gpu", "operator": "Exists"}, {"operator": "Exists"}]),
        "spec.template.spec.tolerations[1]",
        "tolerateAll",
    ),
    (
        pod(tolerations=[{"operator": "Exists", "effect": "NoSchedule"}]),
        "spec.template.spec.tolerations[0]",
        "tolerateAll",
    ),
    (pod(serviceAccountName="admin"), "spec.template.spec.serviceAccountName", "serviceAccount"),
    (pod(serviceAccount="admin"), "spec.template.spec.serviceAccount", "serviceAccount"),
    (
        pod(automountServiceAccountToken=True),
        "spec.template.spec.automountServiceAccountToken",
        "automountToken",
    ),
    (
        pod(
            volumes=[
                {"name": "d", "emptyDir": {}},
                {
                    "name": "token",
                    "projected": {
                        "sources": [
                            {"configMap": {"name": "ca"}},
                            {"serviceAccountToken": {"path": "token", "audience": "api"}},
                        ]
                    },
                },
            ]
        ),
        "spec.template.spec.volumes[1].projected.sources[1].serviceAccountToken",
        "automountToken",
    ),
    (
        pod(containers=[{"name": "sidecar", "securityContext": {"privileged": True}}]),
        "spec.template.spec.containers[0].securityContext.privileged",
        "privileged",
    ),
    (
        pod(
            containers=[
                {"name": "side", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}
            ]
        ),
        "spec.template.spec.containers[0].securityContext.capabilities.add",
        "privileged",
    ),
    (
        pod(initContainers=[{"name": "x", "securityContext": {"privileged": True}}]),
        "spec.template.spec.initContainers[0].securityContext.privileged",
        "privileged",
    ),
]


@pytest.mark.parametrize(("template", "path", "allowance"), CASES)
def test_each_field_is_refused_by_default_named_and_allowed_on_request(template, path, allowance):
    refusal = check(template, "dind-rootless", RESTRICTED)
    assert refusal is not None and refusal.path == path
    assert check(template, "dind-rootless", TemplatePolicy(frozenset({allowance}))) is None
    assert check(template, "dind-rootless", PERMISSIVE) is None


def test_the_modes_own_docker_in_docker_container_may_stay_privileged():
    own_rootless = pod(containers=[runner(privileged=True)])
    assert check(own_rootless, "dind-rootless", RESTRICTED) is None
    assert check(own_rootless, "host", RESTRICTED) is not None  # host mode has no DinD
    assert check(own_rootless, "dind", RESTRICTED) is not None  # in dind the sidecar is
    own_sidecar = pod(initContainers=[{"name": "dind", "securityContext": {"privileged": True}}])
    assert check(own_sidecar, "dind", RESTRICTED) is None
    assert check(own_sidecar, "dind-rootless", RESTRICTED) is not None


def test_service_accounts_are_allowed_by_name_and_default_always():
    assert check(pod(serviceAccountName="default"), "host", RESTRICTED) is None
    listed = TemplatePolicy.parse("restricted", ["ci-builder"])
    assert check(pod(serviceAccountName="ci-builder"), "host", listed) is None
    assert check(pod(serviceAccountName="admin"), "host", listed) is not None


def test_harmless_templates_pass_the_restricted_policy():
    fine = pod(
        nodeSelector={"pool": "ci"},
        tolerations=[{"key": "ci-only", "operator": "Exists", "effect": "NoSchedule"}],
        automountServiceAccountToken=False,
        hostNetwork=False,
        volumes=[{"name": "cache", "emptyDir": {}}],
        containers=[{"name": "runner", "resources": {"limits": {"cpu": "1"}}}],
    )
    assert check(fine, "host", RESTRICTED) is None
    assert check(None, "host", RESTRICTED) is None


def test_policy_values_parse_and_unknown_ones_are_refused():
    assert TemplatePolicy.parse("hostPath, nodeName").allow == {"hostPath", "nodeName"}
    assert TemplatePolicy.parse("permissive") == PERMISSIVE
    with pytest.raises(PolicyError, match="hostpath"):
        TemplatePolicy.parse("hostpath")


def test_every_way_a_template_hands_a_secret_to_a_container_is_found():
    template = pod(
        containers=[
            {
                "name": "runner",
                "env": [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s1", "key": "k"}}}],
                "envFrom": [{"secretRef": {"name": "s2"}}, {"configMapRef": {"name": "c"}}],
            }
        ],
        initContainers=[{"name": "i", "envFrom": [{"secretRef": {"name": "s3"}}]}],
        volumes=[
            {"name": "v", "secret": {"secretName": "s4"}},
            {"name": "p", "projected": {"sources": [{"secret": {"name": "s5"}}]}},
        ],
    )
    refs = secret_refs(template)
    assert [r.name for r in refs] == ["s1", "s2", "s3", "s4", "s5"]
    assert refs[3].path == "spec.template.spec.volumes[0].secret"


# Every field of a Pod spec that names a Secret, with the path the refusal names.
EVERY_SECRET_FIELD: list[tuple[dict[str, Any], str]] = [
    (
        {"containers": [{"name": "c", "env": [{"valueFrom": {"secretKeyRef": {"name": "x"}}}]}]},
        "containers[0].env[0].valueFrom.secretKeyRef",
    ),
    (
        {"initContainers": [{"envFrom": [{"secretRef": {"name": "x"}}]}]},
        "initContainers[0].envFrom[0].secretRef",
    ),
    (
        {"ephemeralContainers": [{"envFrom": [{"secretRef": {"name": "x"}}]}]},
        "ephemeralContainers[0].envFrom[0].secretRef",
    ),
    ({"imagePullSecrets": [{"name": "x"}]}, "imagePullSecrets[0]"),
    ({"volumes": [{"secret": {"secretName": "x"}}]}, "volumes[0].secret"),
    (
        {"volumes": [{"projected": {"sources": [{"secret": {"name": "x"}}]}}]},
        "volumes[0].projected.sources[0].secret",
    ),
    (
        {"volumes": [{"csi": {"driver": "d", "nodePublishSecretRef": {"name": "x"}}}]},
        "volumes[0].csi.nodePublishSecretRef",
    ),
    (
        {"volumes": [{"azureFile": {"secretName": "x", "shareName": "s"}}]},
        "volumes[0].azureFile.secretName",
    ),
    *[
        ({"volumes": [{source: {"secretRef": {"name": "x"}}}]}, f"volumes[0].{source}.secretRef")
        for source in ("cephfs", "cinder", "flexVolume", "iscsi", "rbd", "scaleIO", "storageos")
    ],
]


@pytest.mark.parametrize(
    ("spec", "path"), EVERY_SECRET_FIELD, ids=[p for _, p in EVERY_SECRET_FIELD]
)
def test_every_field_of_a_pod_that_names_a_secret_is_found(spec, path):
    assert [(r.path, r.name) for r in secret_refs({"spec": spec})] == [
        (f"spec.template.spec.{path}", "x")
    ]


def test_a_template_naming_more_secrets_than_are_checked_is_refused_at_the_first_past_the_bound():
    env = [{"valueFrom": {"secretKeyRef": {"name": f"s{i}", "key": "k"}}} for i in range(32)]
    env += [{"valueFrom": {"secretKeyRef": {"name": "s0", "key": "again"}}}]  # not another
    template = pod(containers=[{"name": "runner", "env": env}])
    assert check(template, "dind", RESTRICTED) is None
    template["spec"]["imagePullSecrets"] = [{"name": "the-33rd"}]
    refusal = check(template, "dind", RESTRICTED)
    assert refusal is not None
    assert refusal.path == "spec.template.spec.imagePullSecrets[0]"
    assert f"names 33 Secrets; at most {MAX_TEMPLATE_SECRETS} are checked" in refusal.message
    assert check(template, "dind", TemplatePolicy.parse("unlabelledSecrets")) is None


class FakeCore:
    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels

    async def read_namespaced_secret(self, name: str, namespace: str, **_: Any) -> Any:
        class Meta:
            labels = self.labels
            annotations: dict[str, str] = {}

        class Secret:
            metadata = Meta()
            data: dict[str, str] = {}

        return Secret()


async def test_a_template_secret_without_the_opt_in_label_is_refused_by_name():
    store = SecretStore(None)
    secrets = Secrets(store)
    store._core = FakeCore({})
    with pytest.raises(SecretProblem) as err:
        await secrets.require_opt_in("team-a", "other-team", "spec.template.spec.volumes[0].secret")
    assert err.value.problem.reason == "TemplateNotAllowed"
    assert "spec.template.spec.volumes[0].secret" in err.value.problem.message
    store._core = FakeCore({"gitea.bpg.pw/credentials": "true"})
    secrets.invalidate("team-a", "lent")
    await secrets.require_opt_in("team-a", "lent", "spec.template.spec.volumes[0].secret")


def _reconciler(cluster: FakeCluster, spec: dict[str, Any], **kwargs: Any) -> Reconciler:
    return Reconciler(
        FakeCache(cluster, spec),
        cluster,
        FakeSources(snapshot(queued=2)),  # type: ignore[arg-type]
        Expectations(),
        clock=Clock(),
        **kwargs,
    )


async def test_a_refused_template_creates_no_job_and_says_which_field():
    cluster = FakeCluster()
    spec = {**VALID, "template": pod(volumes=[{"name": "r", "hostPath": {"path": "/"}}])}
    await _reconciler(cluster, spec).reconcile(KEY)
    assert cluster.creates == 0
    assert cluster.status is not None
    ready = next(c for c in cluster.status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "TemplateNotAllowed")
    assert ready["message"].startswith("spec.template.spec.volumes[0].hostPath")
    allowed = FakeCluster()
    await _reconciler(allowed, spec, template_policy=PERMISSIVE).reconcile(KEY)
    await _reconciler(allowed, spec, template_policy=PERMISSIVE).reconcile(KEY)
    assert allowed.creates > 0


async def test_a_group_in_the_operators_own_namespace_is_refused():
    cluster = FakeCluster()
    await _reconciler(cluster, VALID, own_namespace=KEY.split("/")[0]).reconcile(KEY)
    assert cluster.creates == 0 and cluster.status is not None
    ready = next(c for c in cluster.status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "NamespaceNotAllowed"


class OptInSecrets(FakeSecrets):
    """Tokens for the observer; template Secrets opted in unless named in ``refused``."""

    def __init__(self, refused: set[str]) -> None:
        super().__init__({"ns": "t"})
        self.refused = refused
        self.checked: list[str] = []

    async def require_opt_in(self, namespace: str, name: str, field: str) -> None:
        self.checked.append(name)
        if name in self.refused:
            raise SecretProblem(
                Problem("TemplateNotAllowed", f"{field}: {name}", ProblemKind.SECRET)
            )


async def _observe(template: dict[str, Any], secrets: OptInSecrets) -> Any:
    group = parse_spec({**ORG_SPEC, "template": template})
    pool = SessionPool()
    try:
        observer = Observer(secrets, pool, template_policy=RESTRICTED)  # type: ignore[arg-type]
        with aioresponses() as mock:
            gitea(mock)
            snapshot, _ = await observer.observe("ns", group)
    finally:
        await pool.close()
    return snapshot


@pytest.mark.parametrize(
    ("spec", "path"), EVERY_SECRET_FIELD, ids=[p for _, p in EVERY_SECRET_FIELD]
)
async def test_the_observer_checks_every_secret_a_template_names(spec, path):
    template = {"spec": {"containers": [{"name": "runner"}], **copy.deepcopy(spec)}}
    for kind in ("initContainers", "ephemeralContainers"):
        for i, container in enumerate(template["spec"].get(kind, [])):
            container["name"] = f"{kind}-{i}"
    secrets = OptInSecrets({"x"})
    snapshot = await _observe(template, secrets)
    assert snapshot.problem is not None and snapshot.problem.reason == "TemplateNotAllowed"
    assert snapshot.problem.message == f"spec.template.spec.{path}: x"


async def test_the_observer_checks_each_secret_up_to_the_bound_once():
    env = [{"valueFrom": {"secretKeyRef": {"name": f"s{i}", "key": "k"}}} for i in range(32)]
    template = pod(containers=[{"name": "runner", "env": env + env}])
    secrets = OptInSecrets({"s31"})
    snapshot = await _observe(template, secrets)
    assert snapshot.problem is not None and "env[31]" in snapshot.problem.message
    assert secrets.checked == [f"s{i}" for i in range(32)]
