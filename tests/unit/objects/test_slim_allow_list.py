"""The informer caches keep, of the labels and annotations under the operator's own prefix,
only the keys the operator reads, each value within a length cap: a tenant's own Pods and
Jobs (and RunnerGroups) with thousands of ``gitea.bpg.pw/...`` keys and a 250 KiB annotation
cost what plain ones do (issue 36, row 5)."""

from __future__ import annotations

import json

from gitea_runner_operator.api import caps, constants
from gitea_runner_operator.objects.forgejo_job import HANDLE_ANNOTATION
from gitea_runner_operator.objects.slim import slim_group, slim_job, slim_pod

PREFIXED = {f"gitea.bpg.pw/l{i}": "v" * 63 for i in range(3_000)}
OURS = {constants.GROUP_NAME_LABEL: "ci", constants.MANAGED_BY_LABEL: "gitea-runner-operator"}


def meta(**more: object) -> dict[str, object]:
    return {
        "name": "ci-1",
        "namespace": "team-a",
        "uid": "u",
        "labels": {**OURS, **PREFIXED, "batch.kubernetes.io/job-name": "ci-1"},
        "annotations": {
            **PREFIXED,
            "gitea.bpg.pw/blob": "x" * 250 * 1024,
            constants.TOOK_JOB_ANNOTATION: "true",
            HANDLE_ANNOTATION: "h" * (caps.KEPT_VALUE_MAX_CHARS + 1),
        },
        **more,
    }


def test_a_pod_keeps_only_the_operator_keys_it_reads():
    slim = slim_pod({"metadata": meta(), "status": {"phase": "Running"}})
    assert len(json.dumps(slim)) < 1024
    assert slim["metadata"]["labels"] == {**OURS, "batch.kubernetes.io/job-name": "ci-1"}
    assert slim["metadata"]["annotations"] == {constants.TOOK_JOB_ANNOTATION: "true"}


def test_a_job_keeps_only_the_operator_keys_it_reads():
    slim = slim_job({"metadata": meta(), "status": {}})
    assert len(json.dumps(slim)) < 1024
    assert slim["metadata"]["labels"] == {**OURS, "batch.kubernetes.io/job-name": "ci-1"}
    assert slim["metadata"]["annotations"] == {constants.TOOK_JOB_ANNOTATION: "true"}


def test_a_group_keeps_none_of_a_tenants_labels_and_annotations():
    group = {"metadata": meta(), "spec": {"labels": ["a"]}}
    slim = slim_group(group)
    assert len(json.dumps(slim)) < 1024
    assert "annotations" not in slim["metadata"] and "labels" not in slim["metadata"]


def test_a_groups_detach_mark_is_kept_only_within_the_value_cap():
    # The uninstall hook's mark is the one annotation of a group the cache keeps; a tenant
    # can write it too, so a value past the cap is dropped as a runner's would be.
    from gitea_runner_operator.api.detach import SINCE_ANNOTATION, UNTIL_ANNOTATION

    mark = {SINCE_ANNOTATION: "2026-11-27T22:00:00Z", UNTIL_ANNOTATION: "x" * (1 << 20)}
    group = {"metadata": {**meta(), "annotations": mark}, "spec": {}}
    slim = slim_group(group)
    assert slim["metadata"]["annotations"] == {SINCE_ANNOTATION: "2026-11-27T22:00:00Z"}
    assert len(json.dumps(slim)) < 1024
