"""Runner Pods from spec.mode and spec.template: what each mode runs, what a template can
change, and the fields the operator keeps for itself."""

import json

import pytest

from gitea_runner_operator.api import constants
from gitea_runner_operator.api.runnergroup import InvalidSpec, parse_spec
from tests.support.builders import REALISTIC, TOKEN_REF, container, job_for, pod_of, spec_with


def env(c):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def test_dind_userns_is_the_default_and_no_container_of_its_pod_is_privileged():
    pod = pod_of(job_for())
    assert pod["hostUsers"] is False  # the Pod's own user namespace
    assert pod["runtimeClassName"] == "gitea-runner-userns"  # gives the daemon /dev/net/tun
    every = [*pod["initContainers"], *pod["containers"]]
    assert not [c["name"] for c in every if (c.get("securityContext") or {}).get("privileged")]
    runner = container(pod)
    assert runner["image"] == "gitea/runner:1.0.8"
    # the container that runs host steps is what Pod Security `restricted` asks
    sc = runner["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 1000
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert env(runner)["DOCKER_HOST"] == "unix:///run/gro-docker/docker.sock"
    assert not {"DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"} & set(env(runner))  # no TCP, no TLS
    assert "GITEA_RUNNER_REGISTRATION_TOKEN" not in env(runner)
    daemon = container(pod, "dockerd", "initContainers")
    assert daemon["image"] == "docker:29.5.2-dind-rootless"
    assert daemon["restartPolicy"] == "Always"  # a native sidecar: started before the runner
    # root of the Pod's namespace, default capabilities, /proc unmasked: what `baseline`
    # admits for a Pod with hostUsers: false, nothing more
    assert daemon["securityContext"] == {
        "runAsUser": 0,
        "runAsGroup": 0,
        "runAsNonRoot": False,
        "procMount": "Unmasked",
    }
    assert "rootlesskit" in daemon["command"][-1] and "startupProbe" in daemon
    socket = {"name": "gro-docker-socket", "mountPath": "/run/gro-docker"}
    assert socket in daemon["volumeMounts"] and socket in runner["volumeMounts"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["gro-docker-socket"]["emptyDir"]["medium"] == "Memory"
    assert volumes["gro-dind-storage"] == {"name": "gro-dind-storage", "emptyDir": {}}
    # the registration runs first, with the runner container's restricted context
    names = [c["name"] for c in pod["initContainers"]]
    assert names == ["dockerd", "gro-register"]
    assert (
        env(container(pod, "gro-register", "initContainers"))["GITEA_RUNNER_REGISTRATION_TOKEN"]
        == TOKEN_REF
    )
    assert pod["securityContext"] == {"fsGroup": 1000}


def test_dind_userns_keeps_a_templates_runtime_class_and_refuses_host_users():
    pod = pod_of(job_for(template={"spec": {"runtimeClassName": "kata-userns"}}))
    assert pod["runtimeClassName"] == "kata-userns"
    with pytest.raises(InvalidSpec, match=r"spec\.template\.spec\.hostUsers"):
        parse_spec(spec_with(template={"spec": {"hostUsers": True}}))
    # in the other modes the Pod stays in the node's user namespace unless the template asks
    assert "hostUsers" not in pod_of(job_for(mode="dind"))
    parse_spec(spec_with(mode="dind", template={"spec": {"hostUsers": True}}))


def test_dind_userns_daemon_refuses_to_start_where_the_cluster_lacks_what_it_needs():
    """Its script checks, before anything, that the Pod has a user namespace of its own and
    /dev/net/tun, and says which is missing where the group's condition shows it."""
    from gitea_runner_operator.objects.userns import DAEMON_SCRIPT

    assert DAEMON_SCRIPT.index("/proc/self/uid_map") < DAEMON_SCRIPT.index("rootlesskit")
    assert DAEMON_SCRIPT.index("/dev/net/tun") < DAEMON_SCRIPT.index("rootlesskit")
    assert "/dev/termination-log" in DAEMON_SCRIPT
    assert "choose mode dind or dind-rootless explicitly" in DAEMON_SCRIPT


def test_dind_rootless_is_a_privileged_image_with_its_own_daemon():
    pod = pod_of(job_for(mode="dind-rootless"))
    runner = container(pod)
    assert runner["image"] == "gitea/runner:1.0.8-dind-rootless"
    assert runner["securityContext"] == {"privileged": True}
    assert env(runner)["DOCKER_HOST"] == "tcp://localhost:2376"
    # the daemon jobs drive runs in this container: the token is not in it (issue 34)
    assert "GITEA_RUNNER_REGISTRATION_TOKEN" not in env(runner)
    (register,) = pod["initContainers"]
    assert register["name"] == "gro-register"
    assert env(register)["GITEA_RUNNER_REGISTRATION_TOKEN"] == TOKEN_REF
    assert pod["securityContext"] == {"fsGroup": 1000}


def test_dind_runs_docker_in_a_native_sidecar_reached_over_tls():
    pod = pod_of(job_for(mode="dind"))
    runner = container(pod)
    assert runner["image"] == "gitea/runner:1.0.8"
    assert "securityContext" not in runner  # the runner itself needs no privilege
    dind = container(pod, "dind", "initContainers")
    assert dind["image"] == "docker:29.5.2-dind"
    assert dind["restartPolicy"] == "Always"  # a native sidecar: the Pod completes with the runner
    assert dind["securityContext"] == {"privileged": True}
    assert "startupProbe" in dind  # the runner starts only once dockerd answers
    # The certs dockerd writes reach the runner over a shared emptyDir.
    assert env(dind)["DOCKER_TLS_CERTDIR"] == "/certs"
    assert {"name": "gro-docker-certs", "mountPath": "/certs"} in dind["volumeMounts"]
    assert {"name": "gro-docker-certs", "mountPath": "/certs", "readOnly": True} in runner[
        "volumeMounts"
    ]
    assert {"name": "gro-docker-certs", "emptyDir": {}} in pod["volumes"]
    assert env(runner)["DOCKER_HOST"] == "tcp://localhost:2376"
    assert env(runner)["DOCKER_TLS_VERIFY"] == "1"
    assert env(runner)["DOCKER_CERT_PATH"] == "/certs/client"


def test_host_mode_is_unprivileged_and_its_runner_never_holds_the_token():
    job = job_for(mode="host")
    pod = pod_of(job)
    runner = container(pod)
    assert runner["image"] == "gitea/runner:1.0.8"
    sc = runner["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "privileged" not in json.dumps(pod)
    assert not any(k.startswith("DOCKER_") for k in env(runner))
    # Steps run in the runner container: the token is neither in its env nor in any file it
    # could read. An init container registers (writing /data/.runner) and is done before any
    # step runs.
    assert "runner-secrets" not in json.dumps(runner)
    assert "runner-secrets" not in json.dumps(pod["volumes"])
    (register,) = pod["initContainers"]
    assert register["name"] == "gro-register"
    assert register["image"] == runner["image"]
    assert register["securityContext"] == sc
    assert env(register)["GITEA_RUNNER_REGISTRATION_TOKEN"] == TOKEN_REF
    assert register["workingDir"] == "/data"
    assert {"name": "data", "mountPath": "/data"} in register["volumeMounts"]
    assert {"name": "data", "mountPath": "/data"} in runner["volumeMounts"]
    assert "register --no-interactive --ephemeral" in register["command"][-1]
    # Every label runs on the host: there is no Docker to run an image in.
    assert env(runner)["GITEA_RUNNER_LABELS"] == "ubuntu-latest:host,app-infra:host"
    assert env(register)["GITEA_RUNNER_LABELS"] == "ubuntu-latest:host,app-infra:host"
    annotations = job["metadata"]["annotations"]
    assert annotations[constants.RUNNER_LABELS_ANNOTATION] == "ubuntu-latest:host,app-infra:host"


def test_host_mode_registration_gets_the_templates_env_mounts_and_resources_and_runs_last():
    template = {
        "spec": {
            "initContainers": [{"name": "warm-cache", "image": "busybox"}],
            "containers": [
                {
                    "name": "runner",
                    "env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
                    "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                    "readinessProbe": {"exec": {"command": ["true"]}},
                    "args": ["daemon"],
                }
            ],
        }
    }
    pod = pod_of(
        job_for(
            mode="host",
            template=template,
            gitea={
                **spec_with()["gitea"],
                "caBundle": {"configMapKeyRef": {"name": "corp-ca", "key": "ca.crt"}},
            },
        )
    )
    assert [c["name"] for c in pod["initContainers"]] == ["warm-cache", "gro-register"]
    register = container(pod, "gro-register", "initContainers")
    assert env(register)["HTTPS_PROXY"] == "http://proxy:3128"  # it must reach Gitea too
    assert env(register)["SSL_CERT_FILE"]  # and trust its CA
    assert any(m["name"] == "gro-ca-bundle" for m in register["volumeMounts"])
    assert register["resources"] == {"limits": {"cpu": "1", "memory": "1Gi"}}  # for a quota
    assert "readinessProbe" not in register and "args" not in register  # not for an init


def test_a_template_may_not_name_the_registration_container():
    with pytest.raises(InvalidSpec) as err:
        parse_spec(spec_with(template={"spec": {"initContainers": [{"name": "gro-register"}]}}))
    assert "spec.template.spec.initContainers[0].name" in err.value.message
    assert "reserved" in err.value.message


def test_spec_image_overrides_the_modes_image():
    for mode in ("dind-rootless", "dind", "host"):
        assert container(pod_of(job_for(mode=mode, image="registry.local/runner:1")))["image"] == (
            "registry.local/runner:1"
        )


def test_template_fields_pass_through_to_the_runner_pod():
    job = job_for(template=REALISTIC)
    template = job["spec"]["template"]
    pod = template["spec"]
    for key in (
        "nodeSelector",
        "tolerations",
        "priorityClassName",
        "imagePullSecrets",
        "runtimeClassName",
        "serviceAccountName",
        "terminationGracePeriodSeconds",
        "hostAliases",
    ):
        assert pod[key] == REALISTIC["spec"][key], key
    assert template["metadata"]["labels"]["team"] == "a"
    assert template["metadata"]["annotations"] == {"example.com/cost": "ci"}
    runner = container(pod)
    assert runner["resources"] == {"limits": {"cpu": "2", "memory": "4Gi"}}
    assert env(runner)["HTTPS_PROXY"] == "http://proxy:3128"
    assert {"name": "cache", "mountPath": "/cache"} in runner["volumeMounts"]
    assert {"name": "data", "mountPath": "/data"} in runner["volumeMounts"]
    assert [c["name"] for c in pod["containers"]] == ["runner", "cache-proxy"]
    assert container(pod, "cache-proxy") == {"name": "cache-proxy", "image": "example/cache:1"}
    assert container(pod, "warm", "initContainers")["command"] == ["true"]
    # the operator's own (data; the default mode's daemon socket and storage) and the template's
    assert {v["name"] for v in pod["volumes"]} == {
        "data",
        "cache",
        "gro-docker-socket",
        "gro-dind-storage",
    }


def test_owned_fields_win_and_the_users_template_is_not_modified():
    template = {
        "metadata": {"labels": {"app": "mine"}},
        "spec": {"containers": [{"name": "runner", "image": "mine:1"}]},
    }
    before = json.dumps(template, sort_keys=True)
    job = job_for(template=template)
    pod = pod_of(job)
    assert pod["restartPolicy"] == "OnFailure"
    assert job["spec"]["template"]["metadata"]["labels"]["gitea.bpg.pw/runnergroup-name"] == "ci"
    assert job["spec"]["template"]["metadata"]["labels"]["app"] == "ci"
    runner = container(pod)
    assert runner["image"] == "mine:1"  # the template's runner image beats the mode's
    assert env(runner)["GITEA_RUNNER_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert json.dumps(template, sort_keys=True) == before


def test_a_template_without_a_runner_container_gets_one_first():
    template = {"spec": {"containers": [{"name": "side", "image": "side:1"}]}}
    pod = pod_of(job_for(template=template))
    assert [c["name"] for c in pod["containers"]] == ["runner", "side"]


def test_template_settings_beat_the_modes_defaults():
    template = {
        "spec": {
            "automountServiceAccountToken": True,
            "securityContext": {"fsGroup": 2000},
            "volumes": [{"name": "data", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}],
            "containers": [
                {
                    "name": "runner",
                    "securityContext": {"runAsUser": 4242},
                    "env": [{"name": "HOME", "value": "/home/runner"}],
                }
            ],
            "initContainers": [{"name": "dind", "resources": {"limits": {"memory": "8Gi"}}}],
        }
    }
    host = pod_of(job_for(mode="host", template=template))
    assert host["automountServiceAccountToken"] is True
    assert host["securityContext"]["fsGroup"] == 2000
    assert host["securityContext"]["runAsNonRoot"] is True
    (data,) = [v for v in host["volumes"] if v["name"] == "data"]
    assert "ephemeral" in data
    runner = container(host)
    assert runner["securityContext"]["runAsUser"] == 4242
    assert runner["securityContext"]["allowPrivilegeEscalation"] is False
    assert [e for e in runner["env"] if e["name"] == "HOME"] == [
        {"name": "HOME", "value": "/home/runner"}
    ]
    dind = container(pod_of(job_for(mode="dind", template=template)), "dind", "initContainers")
    assert dind["resources"] == {"limits": {"memory": "8Gi"}}
    assert dind["image"] == "docker:29.5.2-dind"


@pytest.mark.parametrize(
    ("template", "field"),
    [
        ({"spec": {"restartPolicy": "Never"}}, "spec.template.spec.restartPolicy"),
        (
            {"metadata": {"labels": {"gitea.bpg.pw/runnergroup-name": "other"}}},
            "spec.template.metadata.labels[gitea.bpg.pw/runnergroup-name]",
        ),
        (
            {"metadata": {"annotations": {"gitea.bpg.pw/took-job": "yes"}}},
            "spec.template.metadata.annotations[gitea.bpg.pw/took-job]",
        ),
        ({"metadata": {"ownerReferences": []}}, "spec.template.metadata.ownerReferences"),
        (
            {
                "spec": {
                    "containers": [
                        {"name": "side"},
                        {"name": "runner", "env": [{"name": "X"}, {"name": "GITEA_RUNNER_LABELS"}]},
                    ]
                }
            },
            "spec.template.spec.containers[1].env[1].name: GITEA_RUNNER_LABELS",
        ),
        (
            {"spec": {"containers": [{"name": "runner", "env": [{"name": "GITEA_INSTANCE_URL"}]}]}},
            "spec.template.spec.containers[0].env[0].name: GITEA_INSTANCE_URL",
        ),
        (
            {"spec": {"volumes": [{"name": "gro-ca-bundle", "emptyDir": {}}]}},
            "spec.template.spec.volumes[0].name",
        ),
        ({"spec": {"containers": [{"name": "a"}, {"name": "a"}]}}, "containers[1].name"),
    ],
)
def test_a_template_setting_an_owned_field_is_refused_naming_it(template, field):
    with pytest.raises(InvalidSpec) as err:
        parse_spec(spec_with(template=template))
    assert field in err.value.message


def test_other_containers_may_use_gitea_env_names():
    template = {"spec": {"containers": [{"name": "side", "env": [{"name": "GITEA_INSTANCE_URL"}]}]}}
    parse_spec(spec_with(template=template))


def test_max_runner_lifetime_caps_pod_and_job():
    job = job_for(maxRunnerLifetime="1h30m")
    assert job["spec"]["activeDeadlineSeconds"] == 5400
    assert pod_of(job)["activeDeadlineSeconds"] == 5400
    assert "activeDeadlineSeconds" not in job_for()["spec"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"maxRunnerLifetime": "10s"}, "spec.maxRunnerLifetime"),
        (
            {"maxRunnerLifetime": "1h", "template": {"spec": {"activeDeadlineSeconds": 60}}},
            "spec.template.spec.activeDeadlineSeconds",
        ),
        ({"startupTimeout": "30s"}, "spec.startupTimeout"),
        ({"mode": "podman"}, "spec.mode"),
        ({"gitea": {"url": "https://g", "caBundle": {}}}, "spec.gitea.caBundle"),
        (
            {
                "gitea": {
                    "url": "https://g",
                    "caBundle": {
                        "configMapKeyRef": {"name": "ca", "key": "ca.crt"},
                        "secretKeyRef": {"name": "ca", "key": "ca.crt"},
                    },
                }
            },
            "exactly one of configMapKeyRef and secretKeyRef",
        ),
        ({"runnerConfig": {"configMapKeyRef": {"name": "Bad!", "key": "k"}}}, "ConfigMap name"),
    ],
)
def test_new_fields_are_validated_naming_the_field(changes, field):
    with pytest.raises(InvalidSpec) as err:
        parse_spec(spec_with(**changes))
    assert field in err.value.message


def test_startup_timeout_is_its_own_setting():
    spec = parse_spec(spec_with(startupTimeout="20m", idleTimeout="2m"))
    assert spec.startup_timeout_seconds == 1200
    assert spec.idle_timeout_seconds == 120


@pytest.mark.parametrize("kind", ["configMapKeyRef", "secretKeyRef"])
def test_ca_bundle_is_mounted_and_named_by_ssl_cert_file(kind):
    bundle = {kind: {"name": "corp-ca", "key": "bundle.pem"}}
    for mode in ("dind-rootless", "dind", "host"):
        pod = pod_of(job_for(mode=mode, gitea={"url": "https://g", "caBundle": bundle}))
        runner = container(pod)
        path = env(runner)["SSL_CERT_FILE"]
        (mount,) = [m for m in runner["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
        assert mount["readOnly"] is True
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        source = volume["configMap"] if kind == "configMapKeyRef" else volume["secret"]
        assert source.get("name", source.get("secretName")) == "corp-ca"
        assert source["items"] == [
            {"key": "bundle.pem", "path": path.removeprefix(mount["mountPath"] + "/")}
        ]


def test_runner_config_is_mounted_and_passed_as_config_file():
    pod = pod_of(job_for(runnerConfig={"configMapKeyRef": {"name": "runner", "key": "cfg.yaml"}}))
    runner = container(pod)
    path = env(runner)["CONFIG_FILE"]
    (mount,) = [m for m in runner["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"] == {
        "name": "runner",
        "items": [{"key": "cfg.yaml", "path": path.removeprefix(mount["mountPath"] + "/")}],
    }
    # Registration and labels stay the operator's: still passed by env.
    assert "GITEA_RUNNER_LABELS" in env(runner)


def test_the_example_group_is_valid_and_renders():
    import yaml

    from tests.support.manifests import MANIFESTS

    (example,) = yaml.safe_load_all((MANIFESTS / "examples" / "runnergroup.yaml").read_text())
    pod = pod_of(job_for(**example["spec"]))
    assert container(pod)["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}
    assert container(pod, "dind", "initContainers")["resources"]["limits"]["memory"] == "8Gi"


def test_default_images_are_released_tags_of_the_runner_the_e2e_suite_follows():
    """A mutable tag (":nightly") would change the runner under an installation; the default
    must be the release whose recorded behaviour the e2e suite's runner follows."""
    from tests.testbed import runners

    images = (constants.DEFAULT_IMAGE, constants.PLAIN_IMAGE, constants.DIND_IMAGE)
    for image in images:
        tag = image.rpartition(":")[2]
        assert tag[0].isdigit() and "nightly" not in tag and "latest" not in tag, image
    followed = ".".join(map(str, runners.TESTBED_FOLLOWS))
    assert followed == constants.RUNNER_VERSION
    assert f"gitea/runner:{constants.RUNNER_VERSION}" == constants.PLAIN_IMAGE
    assert f"gitea/runner:{constants.RUNNER_VERSION}-dind-rootless" == constants.DEFAULT_IMAGE
