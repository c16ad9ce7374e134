import json

from gitea_runner_operator.api import constants
from gitea_runner_operator.api.runnergroup import parse_spec
from gitea_runner_operator.api.shard import lone_shard
from gitea_runner_operator.objects.job_template import render_runner_job
from tests.support.builders import VALID

SHARD = constants.SHARD_LABEL


def render():
    return render_runner_job(
        group_name="ci",
        namespace="team-a",
        group_uid="uid-1",
        spec=parse_spec(VALID),
        job_name="ci-0123abcd-bcdfg",
    )


def env_of(job):
    return {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_job_metadata_ties_it_to_its_group():
    job = render()
    meta = job["metadata"]
    assert meta["name"] == "ci-0123abcd-bcdfg"
    assert meta["namespace"] == "team-a"
    assert meta["labels"] == {
        "app": "ci",
        "gitea.bpg.pw/managed-by": "gitea-runner-operator",
        "gitea.bpg.pw/runnergroup-name": "ci",
        "gitea.bpg.pw/shard": lone_shard("team-a/ci"),
    }
    assert job["spec"]["template"]["metadata"]["labels"] == meta["labels"]

    (owner,) = meta["ownerReferences"]
    assert owner == {
        "apiVersion": "gitea.bpg.pw/v1alpha1",
        "kind": "RunnerGroup",
        "name": "ci",
        "uid": "uid-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_job_runs_one_ephemeral_runner_named_after_its_pod():
    job = render()
    spec = job["spec"]
    assert spec["ttlSecondsAfterFinished"] == 600
    assert 0 < spec["backoffLimit"] <= 3
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "OnFailure"
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    assert container["name"] == "runner"
    assert container["image"] == constants.PLAIN_IMAGE  # dind-userns: the daemon is a sidecar
    assert container["securityContext"]["runAsNonRoot"] is True
    env = env_of(job)
    assert env["GITEA_INSTANCE_URL"]["value"] == "https://gitea.example.com"
    assert env["GITEA_RUNNER_EPHEMERAL"]["value"] == "true"
    assert (
        env["GITEA_RUNNER_LABELS"]["value"] == "ubuntu-latest:docker://node:20-bookworm,app-infra"
    )
    assert env["GITEA_RUNNER_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["DOCKER_HOST"]["value"] == "unix:///run/gro-docker/docker.sock"
    assert {"name": "data", "emptyDir": {}} in pod["volumes"]
    assert {"name": "data", "mountPath": "/data"} in container["volumeMounts"]


def test_registration_token_is_referenced_never_copied():
    job = render()
    pod = job["spec"]["template"]["spec"]
    (register,) = [c for c in pod["initContainers"] if c["name"] == "gro-register"]
    register_env = {e["name"]: e for e in register["env"]}
    token = register_env["GITEA_RUNNER_REGISTRATION_TOKEN"]
    assert "value" not in token
    assert token["valueFrom"] == {"secretKeyRef": {"name": "runner-secrets", "key": "registration"}}
    # the runner container, where the daemon jobs drive runs in this mode, has none of it
    assert "GITEA_RUNNER_REGISTRATION_TOKEN" not in env_of(job)
    # The auth token is the operator's alone: it must not reach the runner in any form.
    assert '"api"' not in json.dumps(pod)
    for env in [*env_of(job).values(), *register_env.values()]:
        assert (
            "secretKeyRef" not in json.dumps(env)
            or env["name"] == "GITEA_RUNNER_REGISTRATION_TOKEN"
        )


def test_host_mode_renders_labels_the_runner_reads_back_as_the_same_names():
    from gitea_runner_operator.api.labels import RunnerLabel, Schema
    from gitea_runner_operator.objects.job_template import rendered_labels

    spec = parse_spec({**VALID, "mode": "host", "labels": ["linux:docker://node:20", "app-infra"]})
    rendered = rendered_labels(spec)
    assert rendered == ["linux:host", "app-infra:host"]
    names = [RunnerLabel.parse(raw, set(Schema)).name for raw in rendered]
    assert names == [label.name for label in spec.runner_labels]


def test_job_and_its_pods_carry_the_shard_of_the_groups_domain():
    """Under --sharding each replica's Job and Pod watches select the buckets it holds: a
    Job's Pods must carry its bucket from the start (a Job's template cannot change)."""
    job = render_runner_job(
        group_name="ci",
        namespace="team-a",
        group_uid="uid-1",
        spec=parse_spec(VALID),
        job_name="ci-0123abcd-bcdfg",
        shard="17",
    )
    assert job["metadata"]["labels"][SHARD] == "17"
    assert job["spec"]["template"]["metadata"]["labels"][SHARD] == "17"
    assert render()["metadata"]["labels"][SHARD] == render()["metadata"]["labels"][SHARD]
