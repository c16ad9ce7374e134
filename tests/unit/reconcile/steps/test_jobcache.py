"""spec.cache: the rendered cache server objects, the merged runner config, and the ensure
step over in-memory stand-ins for the API server. The real API server (RBAC, Pod Security
``restricted``, garbage collection) is exercised by tests/integration/test_cache.py."""

from __future__ import annotations

import base64
import copy
import re
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.api import constants
from gitea_runner_operator.api.cache import (
    RUNNER_CONFIG_KEY,
    SECRET_KEY,
    SERVER_CONFIG_KEY,
    RunnerConfigConflict,
    cache_object_name,
    merge_runner_config,
    service_url,
)
from gitea_runner_operator.api.observation import Problem, ProblemKind
from gitea_runner_operator.api.runnergroup import InvalidSpec, parse_spec
from gitea_runner_operator.kube.configmaps import ReferenceProblem
from gitea_runner_operator.kube.secrets import SecretProblem
from gitea_runner_operator.objects.job_template import render_runner_job
from gitea_runner_operator.objects.jobcache_server import (
    made_for,
    render_deployment,
    render_pvc,
    render_secret,
    render_service,
)
from gitea_runner_operator.reconcile.jobcache_plan import PVC_PENDING_WARNING
from gitea_runner_operator.reconcile.status.conditions import status_differs
from gitea_runner_operator.reconcile.status.parts import Part
from gitea_runner_operator.reconcile.steps.jobcache import (
    DRIFT_RESYNC,
    RESYNC,
    STATUS_EVERY,
    CacheServers,
)
from tests.support import REPO_ROOT
from tests.support.builders import VALID
from tests.support.fake_cluster import Clock, FakeCluster, make, snapshot

NS, NAME, UID = "team-a", "ci", "u1"
OWNED = {"group_name": NAME, "namespace": NS, "group_uid": UID}
SECRET = "s3cr3t-generated-value"


def spec(cache: dict[str, Any] | None = None, **more: Any) -> Any:
    return parse_spec({**VALID, "cache": {"enabled": True, **(cache or {})}, **more})


# ------------------------------------------------------------------ spec and config


def test_cache_spec_defaults_and_refusals():
    cache = spec().cache
    assert (cache.enabled, cache.size, cache.persistent, cache.runs_server) == (
        True,
        "10Gi",
        True,
        True,
    )
    assert parse_spec(VALID).cache is None
    with pytest.raises(InvalidSpec, match=r"spec.cache.size: .*storage quantity"):
        spec({"size": "ten gigs"})
    external = {"url": "http://cache.example:8088", "secretRef": {"name": "c", "key": "k"}}
    assert spec({"externalServer": external}).cache.external_server.url.endswith(":8088/")
    with pytest.raises(InvalidSpec, match="with externalServer the operator runs no cache"):
        spec({"externalServer": external, "storageClassName": "fast"})
    with pytest.raises(InvalidSpec, match="must not carry credentials"):
        spec({"externalServer": {**external, "url": "http://u:p@cache.example"}})


def test_merged_runner_config_keeps_the_users_settings_and_owns_the_server_and_secret():
    user = """
log: {level: debug}
runner: {capacity: 1, envs: {A: b}}
cache: {enabled: false, external_server: http://elsewhere/, dir: /x, offline_mode: true}
container: {network: host}
"""
    merged = yaml.safe_load(
        merge_runner_config(user, server_url="http://s:8088/", secret=SECRET, offline_mode=None)
    )
    assert merged["log"] == {"level": "debug"}
    assert merged["runner"] == {"capacity": 1, "envs": {"A": "b"}}
    assert merged["container"] == {"network": "host"}
    assert merged["cache"] == {
        "enabled": True,
        "external_server": "http://s:8088/",
        "external_secret": SECRET,
        "dir": "/x",
        "offline_mode": True,
    }
    only = yaml.safe_load(
        merge_runner_config(None, server_url="http://s:8088/", secret=SECRET, offline_mode=False)
    )
    assert only == {
        "cache": {
            "enabled": True,
            "external_server": "http://s:8088/",
            "external_secret": SECRET,
            "offline_mode": False,
        }
    }
    for bad in ("- a list", "cache: [1]"):
        with pytest.raises(RunnerConfigConflict):
            merge_runner_config(bad, server_url="u", secret=SECRET, offline_mode=None)


@pytest.mark.parametrize("group", ["ci", "a" * 45, "9lives", "x.y"])
def test_object_names_are_service_names(group):
    name = cache_object_name(group)
    assert len(name) <= 63 and re.match(r"^[a-z]([-a-z0-9]*[a-z0-9])?$", name)
    assert name == cache_object_name(group)
    assert service_url(group, NS) == f"http://{name}.{NS}.svc:8088/"


# ------------------------------------------------------------------ rendering


def owner_refs(obj: dict[str, Any]) -> list[tuple[str, str, bool]]:
    return [(o["kind"], o["uid"], o["controller"]) for o in obj["metadata"]["ownerReferences"]]


def test_every_object_is_owned_by_the_group_and_never_looks_like_a_runner():
    s = spec()
    objects = [
        render_deployment(**OWNED, spec=s),
        render_pvc(**OWNED, spec=s),
        render_service(**OWNED),
        render_secret(**OWNED, values={SECRET_KEY: SECRET}),
    ]
    for obj in objects:
        assert owner_refs(obj) == [("RunnerGroup", UID, True)]
        assert obj["metadata"]["name"] == "ci-cache"
        # the informers select runner Jobs/Pods on this label: a cache Pod is no runner
        assert constants.MANAGED_BY_LABEL not in obj["metadata"]["labels"]
    pod_labels = objects[0]["spec"]["template"]["metadata"]["labels"]
    assert constants.MANAGED_BY_LABEL not in pod_labels
    assert objects[2]["spec"]["selector"] == pod_labels
    assert objects[1]["spec"]["resources"]["requests"]["storage"] == "10Gi"


def test_the_cache_pod_meets_pod_security_restricted():
    pod = render_deployment(**OWNED, spec=spec())["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["runAsNonRoot"] is True and sc["readOnlyRootFilesystem"] is True
    assert "privileged" not in sc
    assert {v["name"]: set(v) - {"name"} for v in pod["volumes"]} == {
        "data": {"persistentVolumeClaim"},
        "config": {"secret"},
    }
    assert container["args"][container["args"].index("--host") + 1] == "ci-cache.team-a.svc"
    assert "env" not in container  # the secret is in the mounted config file only


def test_the_cache_pod_follows_the_groups_template():
    template = {
        "spec": {
            "nodeSelector": {"pool": "ci"},
            "tolerations": [{"key": "ci", "operator": "Exists"}],
            "securityContext": {"runAsUser": 2000, "fsGroup": 2000},
            "containers": [
                {"name": "runner", "image": "reg.invalid/runner:1", "imagePullPolicy": "Never"}
            ],
        }
    }
    s = spec(
        {"persistent": False, "size": "2Gi", "resources": {"limits": {"memory": "256Mi"}}},
        template=template,
    )
    pod = render_deployment(**OWNED, spec=s)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "ci"}
    assert pod["tolerations"] == [{"key": "ci", "operator": "Exists"}]
    assert pod["securityContext"]["runAsUser"] == 2000 and pod["securityContext"]["fsGroup"] == 2000
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert (container["image"], container["imagePullPolicy"]) == ("reg.invalid/runner:1", "Never")
    assert container["resources"] == {"limits": {"memory": "256Mi"}}
    assert pod["volumes"][0] == {"name": "data", "emptyDir": {"sizeLimit": "2Gi"}}


def test_runner_jobs_mount_the_merged_config_secret_and_carry_no_value():
    s = spec(runnerConfig={"configMapKeyRef": {"name": "cfg", "key": "config.yaml"}})
    job = render_runner_job(
        group_name=NAME, namespace=NS, group_uid=UID, spec=s, job_name="ci-abc-1"
    )
    pod = job["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "gro-runner-config")
    assert volume == {
        "name": "gro-runner-config",
        "secret": {
            "secretName": "ci-cache",
            "items": [{"key": RUNNER_CONFIG_KEY, "path": "config.yaml"}],
        },
    }
    assert not [v for v in pod["volumes"] if "configMap" in v]
    runner = pod["containers"][0]
    assert {"name": "CONFIG_FILE", "value": "/etc/gitea-runner-operator/config/config.yaml"} in (
        runner["env"]
    )
    assert SECRET not in repr(job)
    # without spec.cache the ConfigMap is mounted as before
    plain = parse_spec({**VALID, "runnerConfig": {"configMapKeyRef": {"name": "c", "key": "k"}}})
    job = render_runner_job(
        group_name=NAME, namespace=NS, group_uid=UID, spec=plain, job_name="ci-abc-2"
    )
    volume = next(v for v in job["spec"]["template"]["spec"]["volumes"] if "configMap" in v)
    assert volume["configMap"]["name"] == "c"


# ------------------------------------------------------------------ the ensure step


class FakeObjects:
    """Plays the API server for the cache objects: each object gets a uid and a
    resourceVersion; an apply with a stale version and a delete with another uid fail as
    the API server's preconditions do."""

    def __init__(self) -> None:
        self.store: dict[tuple[str, str], dict[str, Any]] = {}
        self.applies: list[str] = []
        self.deleted: list[str] = []
        self.reads = 0
        self.preconditions: list[tuple[str, str | None]] = []
        self.refuse: int | None = None
        self._serial = 0

    def _stamp(self, obj: dict[str, Any], uid: str | None = None) -> dict[str, Any]:
        self._serial += 1
        meta = {**obj["metadata"], "resourceVersion": str(self._serial)}
        meta["uid"] = uid or f"uid-{obj['kind']}-{self._serial}"
        return {**obj, "metadata": meta}

    def put(self, obj: dict[str, Any]) -> None:
        """An object someone else made."""
        self.store[(obj["kind"], obj["metadata"]["name"])] = self._stamp(obj)

    async def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads += 1
        return self.store.get((kind, name))

    async def apply(self, manifest: dict[str, Any], *, resource_version: str | None) -> None:
        if self.refuse:
            exc = ApiException(status=self.refuse)
            exc.body = '{"message": "secrets is forbidden: User cannot create"}'
            raise exc
        key = (manifest["kind"], manifest["metadata"]["name"])
        current = self.store.get(key)
        if resource_version is not None and (
            current is None or current["metadata"]["resourceVersion"] != resource_version
        ):
            raise ApiException(status=409)
        self.applies.append(manifest["kind"])
        self.preconditions.append((manifest["kind"], resource_version))
        uid = current["metadata"]["uid"] if current else None
        merged = {**(current or {}), **manifest}
        self.store[key] = self._stamp(merged, uid)

    async def create_if_absent(self, manifest: dict[str, Any]) -> bool:
        key = (manifest["kind"], manifest["metadata"]["name"])
        if key in self.store:
            return False
        self.applies.append(manifest["kind"])
        self.store[key] = self._stamp(manifest)
        return True

    async def delete(self, kind: str, namespace: str, name: str, uid: str) -> bool:
        current = self.store.get((kind, name))
        if current is None or current["metadata"]["uid"] != uid:
            return False
        self.deleted.append(kind)
        del self.store[(kind, name)]
        return True

    @property
    def writes(self) -> int:
        return len(self.applies) + len(self.deleted)

    def secret_values(self) -> dict[str, str]:
        data = self.store[("Secret", "ci-cache")]["data"]
        return {k: base64.b64decode(v).decode() for k, v in data.items()}


class FakeConfigs:
    def __init__(self, text: str | None = "runner: {capacity: 1}\n") -> None:
        self.text = text

    async def read_config_map_key(self, namespace, name, key, *, field, reason_prefix) -> str:
        if self.text is None:
            raise ReferenceProblem(Problem("RunnerConfigNotFound", f"{field}: not found"))
        return self.text


class FakeSecrets:
    def __init__(self, value: str | None = "external-value") -> None:
        self.value = value
        self.asked: list[tuple[str, str]] = []

    async def read(self, namespace, name, key, field, gitea_url) -> str:
        self.asked.append((name, key))
        if self.value is None:
            raise SecretProblem(
                Problem("SecretNotAllowed", f"{field}: lacks the label", ProblemKind.SECRET)
            )
        return self.value


class PassWrites:
    """The status writes of the passes that carry the cache step's part: the pass composes
    ``status.cache`` into the whole status, and writes (and sends the part's Warnings) only
    when something in it changed."""

    def __init__(self) -> None:
        self.status: dict[str, Any] = {}
        self.patches = 0
        self.events: list[tuple[str, str, str]] = []

    def write(self, group: dict[str, Any], part: Part) -> None:
        if not status_differs(group.get("status") or {}, part.fields):
            return
        self.patches += 1
        self.status.update(part.fields)
        self.events.extend(("Warning", reason, message) for reason, message in part.events)


class Env:
    def __init__(self, configs: FakeConfigs | None = None, secrets: FakeSecrets | None = None):
        self.objects = FakeObjects()
        self.reporter = PassWrites()
        self.secrets = secrets or FakeSecrets()
        self.clock = Clock()
        self.wall = 1_000_000.0
        self.tokens = iter(["first-token", "second-token"])
        self.servers = CacheServers(
            self.objects,
            configs or FakeConfigs(),
            self.secrets,
            clock=self.clock,
            wall_clock=lambda: self.wall,
            token=lambda: next(self.tokens),
            jitter=lambda: self.jitter,
        )
        self.jitter = 0.0
        self.generation = 1

    def group(self) -> dict[str, Any]:
        meta = {"name": NAME, "namespace": NS, "uid": UID, "generation": self.generation}
        return {"metadata": meta, "status": dict(self.reporter.status)}

    async def ensure(self, s: Any) -> bool:
        group = self.group()
        ok = await self.servers.ensure(group, s)
        self.reporter.write(group, self.servers.part(group))
        return ok

    def leaks(self, value: str) -> bool:
        return value in repr(self.reporter.status) or value in repr(self.reporter.events)


CONFIGURED = {"runnerConfig": {"configMapKeyRef": {"name": "cfg", "key": "config.yaml"}}}


async def test_first_pass_creates_everything_and_the_secret_is_generated_once():
    env = Env()
    s = spec(**CONFIGURED)
    assert await env.ensure(s) is True
    assert sorted(env.objects.applies) == [
        "Deployment",
        "PersistentVolumeClaim",
        "Secret",
        "Service",
    ]
    values = env.objects.secret_values()
    assert values[SECRET_KEY] == "first-token"
    runner_cfg = yaml.safe_load(values[RUNNER_CONFIG_KEY])
    assert runner_cfg["runner"] == {"capacity": 1}
    assert runner_cfg["cache"]["external_server"] == "http://ci-cache.team-a.svc:8088/"
    assert runner_cfg["cache"]["external_secret"] == "first-token"
    server_cfg = yaml.safe_load(values[SERVER_CONFIG_KEY])
    assert server_cfg["cache"]["external_secret"] == "first-token"
    assert env.reporter.status["cache"] == {
        "ready": False,
        "service": "ci-cache:8088",
        "url": "http://ci-cache.team-a.svc:8088/",
        "reason": "CacheServerStarting",
        "message": "the cache server is not ready yet",
    }
    assert env.reporter.events == []  # starting is no warning

    # a spec change re-applies, keeping the generated secret; a restarted operator too
    env.generation = 2
    await env.ensure(s)
    assert env.objects.secret_values()[SECRET_KEY] == "first-token"
    env.servers._memo.clear()
    await env.ensure(s)
    assert env.objects.secret_values()[SECRET_KEY] == "first-token"
    assert not env.leaks("first-token")


async def test_quiet_passes_cost_no_writes_and_readiness_is_reported():
    env = Env()
    s = spec()
    await env.ensure(s)
    applies = len(env.objects.applies)
    env.objects.store[("Deployment", "ci-cache")]["status"] = {"readyReplicas": 1}
    await env.ensure(s)  # within STATUS_EVERY: not even a read
    assert env.reporter.status["cache"]["ready"] is False
    env.clock.now += 20
    await env.ensure(s)
    assert env.reporter.status["cache"]["ready"] is True
    assert env.reporter.status["cache"]["reason"] == "Ready"
    patches = env.reporter.patches
    env.clock.now += 20
    await env.ensure(s)
    assert len(env.objects.applies) == applies  # nothing re-applied before the resync
    assert env.reporter.patches == patches  # nothing changed: no status write
    env.clock.now += 200
    await env.ensure(s)
    assert len(env.objects.applies) == applies  # inputs checked, unchanged: no write
    env.clock.now += DRIFT_RESYNC
    await env.ensure(s)
    assert len(env.objects.applies) > applies  # the slow resync puts hand edits back


async def test_a_claim_that_does_not_bind_gets_one_warning():
    env = Env()
    s = spec({"storageClassName": "nowhere"})
    await env.ensure(s)
    pvc = env.objects.store[("PersistentVolumeClaim", "ci-cache")]
    pvc["status"] = {"phase": "Pending"}
    pvc["metadata"]["creationTimestamp"] = "1970-01-12T13:46:40Z"  # == wall
    env.clock.now += 20
    await env.ensure(s)
    assert env.reporter.status["cache"]["reason"] == "CacheServerStarting"
    env.wall += PVC_PENDING_WARNING + 1
    env.clock.now += 20
    await env.ensure(s)
    env.clock.now += 20
    await env.ensure(s)
    cache = env.reporter.status["cache"]
    assert (cache["ready"], cache["reason"]) == (False, "CacheVolumePending")
    assert "storageClassName nowhere" in cache["message"]
    assert [e[:2] for e in env.reporter.events] == [("Warning", "CacheVolumePending")]


async def test_disabling_the_cache_deletes_the_server_and_clears_the_status():
    env = Env()
    await env.ensure(spec())
    assert await env.ensure(parse_spec({**VALID, "cache": {"enabled": False}})) is True
    assert sorted(env.objects.deleted) == [
        "Deployment",
        "PersistentVolumeClaim",
        "Secret",
        "Service",
    ]
    assert env.reporter.status["cache"] is None
    deleted = len(env.objects.deleted)
    await env.ensure(parse_spec(VALID))  # nothing to remove any more: no API calls
    assert len(env.objects.deleted) == deleted


async def test_passes_before_the_status_shows_the_cache_gone_remove_nothing_again():
    """The pass writes status.cache after the step (and at most once a second): until the
    watch shows it gone, the step must not read and delete the removed objects again."""
    env = Env()
    await env.ensure(spec())
    stale = env.group()  # still says the cache exists
    off = parse_spec({**VALID, "cache": {"enabled": False}})
    assert await env.servers.ensure(stale, off) is True
    reads, deleted = env.objects.reads, len(env.objects.deleted)
    assert deleted == 4
    assert await env.servers.ensure(stale, off) is True
    assert (env.objects.reads, len(env.objects.deleted)) == (reads, deleted)
    assert env.servers.part(stale).fields == {"cache": None}  # still to be written


async def test_an_external_server_gets_its_secret_from_a_labelled_secret_only():
    env = Env()
    external = {"url": "http://cache.example:8088", "secretRef": {"name": "ext", "key": "k"}}
    s = spec({"externalServer": external})
    assert await env.ensure(s) is True
    assert env.objects.applies == ["Secret"]
    assert env.secrets.asked == [("ext", "k")]
    cfg = yaml.safe_load(env.objects.secret_values()[RUNNER_CONFIG_KEY])
    assert cfg["cache"]["external_server"] == "http://cache.example:8088/"
    assert cfg["cache"]["external_secret"] == "external-value"
    assert SECRET_KEY not in env.objects.secret_values()
    assert env.reporter.status["cache"]["reason"] == "ExternalServer"
    assert not env.leaks("external-value")

    refused = Env(secrets=FakeSecrets(None))
    assert await refused.ensure(s) is False
    assert refused.reporter.status["cache"]["reason"] == "SecretNotAllowed"
    assert refused.reporter.events[0][:2] == ("Warning", "SecretNotAllowed")


async def test_problems_hold_runners_back_with_a_reason():
    missing = Env(configs=FakeConfigs(None))
    assert await missing.ensure(spec(**CONFIGURED)) is False
    assert missing.reporter.status["cache"]["reason"] == "RunnerConfigNotFound"
    assert missing.objects.applies == []

    forbidden = Env()
    forbidden.objects.refuse = 403
    assert await forbidden.ensure(spec()) is False
    cache = forbidden.reporter.status["cache"]
    assert cache["reason"] == "CacheRefused" and "forbidden" in cache["message"]
    # retried soon, not on every pass
    forbidden.objects.refuse = None
    assert await forbidden.ensure(spec()) is False
    forbidden.clock.now += 20
    assert await forbidden.ensure(spec()) is True


async def test_the_reconciler_creates_no_runner_before_the_config_secret_is_written():
    cluster = FakeCluster()
    env = Env(configs=FakeConfigs(None))
    raw = {**VALID, "maxActiveRunners": 3, "cache": {"enabled": True}, **CONFIGURED}
    reconciler, _, _ = make(cluster, snapshot(queued=2), spec=raw)
    reconciler._jobcache = env.servers
    result = await reconciler.reconcile("team-a/ci")
    assert cluster.all_created == 0
    assert result.requeue_after is not None

    env.servers._configs = FakeConfigs()
    env.clock.now += 20
    await reconciler.reconcile("team-a/ci")
    assert cluster.all_created == 2


async def test_a_starting_cache_server_brings_the_pass_back_until_it_is_ready():
    """Nothing watches the cache server's Deployment, and a reconcile is queued only when
    something it watches changes: while the server starts, the pass itself comes back to read
    it, or status.cache would say "not ready" until the resync (a minute and more)."""
    cluster = FakeCluster()
    env = Env()
    raw = {**VALID, "maxActiveRunners": 3, "cache": {"enabled": True}}
    reconciler, _, _ = make(cluster, snapshot(queued=2), spec=raw)
    reconciler._jobcache = env.servers
    result = await reconciler.reconcile("team-a/ci")
    assert cluster.all_created == 2  # a starting server holds no runner back
    assert env.servers.settling("team-a/ci")
    assert result.requeue_after is not None and result.requeue_after <= STATUS_EVERY

    env.objects.store[("Deployment", "ci-cache")]["status"] = {"readyReplicas": 1}
    env.clock.now += STATUS_EVERY
    await reconciler.reconcile("team-a/ci")
    assert not env.servers.settling("team-a/ci")


# ------------------------------------------------------------------ only what it made


def foreign(kind: str, **meta: Any) -> dict[str, Any]:
    """Another application's object that happens to be named like the group's cache."""
    return {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"name": "ci-cache", "namespace": NS, "labels": {"app": "db"}, **meta},
        "spec": {"theirs": True},
    }


OFF = {**VALID, "cache": {"enabled": False}}


def test_only_the_groups_label_and_owner_reference_make_an_object_the_groups():
    ours = render_service(**OWNED)
    assert made_for(ours, NAME, UID)
    assert not made_for(ours, NAME, "another-uid")  # a former group of that name
    assert not made_for(ours, "other", UID)
    label_only = {**ours, "metadata": {**ours["metadata"], "ownerReferences": []}}
    assert not made_for(label_only, NAME, UID)
    owner_only = {**ours, "metadata": {**ours["metadata"], "labels": {}}}
    assert not made_for(owner_only, NAME, UID)
    assert not made_for(foreign("Service"), NAME, UID)


@pytest.mark.parametrize("kind", ["Secret", "Service", "PersistentVolumeClaim", "Deployment"])
async def test_an_object_it_did_not_make_is_refused_never_applied_over_reused_or_deleted(kind):
    env = Env()
    env.objects.put(foreign(kind))
    theirs = copy.deepcopy(env.objects.store)
    assert await env.ensure(spec()) is False  # no runner may mount a config it never wrote
    cache = env.reporter.status["cache"]
    assert cache["reason"] == "CacheObjectNotOwned"
    assert f"{kind} team-a/ci-cache exists but was not made by the operator" in cache["message"]
    assert env.reporter.events[0][:2] == ("Warning", "CacheObjectNotOwned")
    assert env.objects.applies == [] and env.objects.store == theirs
    env.clock.now += 20  # retried: still refused
    assert await env.ensure(spec()) is False and env.objects.store == theirs
    # turning the cache off deletes nothing of theirs
    assert await env.ensure(parse_spec(OFF)) is True
    assert env.objects.deleted == [] and env.objects.store == theirs
    assert env.reporter.status["cache"] is None


async def test_writes_and_deletes_carry_what_was_read_as_a_precondition():
    env = Env()
    await env.ensure(spec())
    assert {v for _, v in env.objects.preconditions} == {None}  # created: nothing was there
    versions = {k: o["metadata"]["resourceVersion"] for (k, _), o in env.objects.store.items()}
    env.clock.now += DRIFT_RESYNC
    await env.ensure(spec())
    assert env.objects.preconditions[-3:] == [
        (kind, versions[kind]) for kind in ("Secret", "Service", "Deployment")
    ]

    class Replaced(FakeObjects):
        """Another application replaced the object between the read and the delete."""

        swap = False

        async def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
            seen = await super().read(kind, namespace, name)
            if self.swap and kind == "PersistentVolumeClaim" and seen is not None:
                self.put(foreign(kind))
            return seen

    replaced = Env()
    replaced.servers._writes._objects = replaced.objects = Replaced()
    await replaced.ensure(spec())
    replaced.objects.swap = True
    assert await replaced.ensure(parse_spec(OFF)) is True
    assert sorted(replaced.objects.deleted) == ["Deployment", "Secret", "Service"]
    pvc = replaced.objects.store[("PersistentVolumeClaim", "ci-cache")]
    assert pvc["spec"] == {"theirs": True}


# ------------------------------------------------------------------ writes only on change


async def test_a_quiet_group_is_written_only_when_its_inputs_change_or_on_the_slow_resync():
    configs = FakeConfigs()
    env = Env(configs=configs)
    env.jitter = 0.5  # resync after 87.5 % of DRIFT_RESYNC
    s = spec(**CONFIGURED)
    await env.ensure(s)
    env.objects.store[("Deployment", "ci-cache")]["status"] = {"readyReplicas": 1}
    first = (env.objects.writes, env.objects.reads)
    passes, start = 0, env.clock.now
    while env.clock.now < start + 0.85 * DRIFT_RESYNC:  # a pass every 10 s, for 51 minutes
        env.clock.now += 10
        await env.ensure(s)
        passes += 1
    assert passes == 306
    # no write at all; its own objects read once, for readiness
    assert (env.objects.writes, env.objects.reads) == (first[0], first[1] + 2)
    env.generation = 2  # a spec change that does not touch the cache (maxActiveRunners)
    await env.ensure(s)
    assert env.objects.writes == first[0]
    env.clock.now += 0.05 * DRIFT_RESYNC  # past the jittered resync
    await env.ensure(s)
    assert env.objects.writes == first[0] + 3  # the PVC is never written again
    written = env.objects.writes

    configs.text = "runner: {capacity: 2}\n"  # the runnerConfig ConfigMap changed
    env.clock.now += RESYNC
    await env.ensure(s)
    assert env.objects.writes == written + 3  # the Secret, Service and Deployment
    runner_cfg = yaml.safe_load(env.objects.secret_values()[RUNNER_CONFIG_KEY])
    assert runner_cfg["runner"] == {"capacity": 2}
    assert env.objects.secret_values()[SECRET_KEY] == "first-token"  # kept


async def test_an_external_secret_that_changed_is_written_on_the_next_check():
    env = Env()
    external = {"url": "http://cache.example:8088", "secretRef": {"name": "ext", "key": "k"}}
    s = spec({"externalServer": external})
    await env.ensure(s)
    env.clock.now += RESYNC
    await env.ensure(s)
    assert env.objects.applies == ["Secret"]
    env.secrets.value = "rotated-value"
    env.clock.now += RESYNC
    await env.ensure(s)
    assert env.objects.applies == ["Secret", "Secret"]
    cfg = yaml.safe_load(env.objects.secret_values()[RUNNER_CONFIG_KEY])
    assert cfg["cache"]["external_secret"] == "rotated-value"
    assert not env.leaks("rotated-value")


def test_the_operator_may_read_every_cache_object_it_checks_before_a_write():
    """Ownership is checked by reading each object first: every role that lets the operator
    write cache objects lets it read them too."""

    root = REPO_ROOT / "manifests"
    roles = [
        doc
        for path in (root / "rbac.yaml", root / "namespaced" / "roles.yaml")
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc.get("kind") in ("ClusterRole", "Role")
    ]
    checked = 0
    for role in roles:
        for rule in role.get("rules") or []:
            for resource in rule["resources"]:
                if resource in ("deployments", "services", "persistentvolumeclaims"):
                    assert "get" in rule["verbs"], (role["metadata"]["name"], resource)
                    checked += 1
    assert checked == 9
