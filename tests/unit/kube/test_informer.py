"""The informer against a scripted API: list, watch, a 410 Gone in the stream, re-list.
Scripted because a real API server cannot be made to expire a watch on demand."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from gitea_runner_operator.kube.informer import Informer


def obj(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


class FakeResponse:
    status = 200
    reason = "OK"

    def __init__(self, body: Any = None, lines: list[dict[str, Any]] | None = None) -> None:
        self._body = body
        self._lines = [json.dumps(line).encode() + b"\n" for line in lines or []]
        self.content = self

    async def read(self) -> bytes:
        return json.dumps(self._body).encode()

    async def readline(self) -> bytes:
        await asyncio.sleep(0)
        return self._lines.pop(0) if self._lines else b""

    def release(self) -> None:
        pass

    def close(self) -> None:
        pass


class ScriptedAPI:
    """Each list returns the next snapshot; each watch returns the next event script."""

    def __init__(self, lists: list[dict[str, Any]], watches: list[list[dict[str, Any]]]) -> None:
        self.lists = lists
        self.watches = watches
        self.calls: list[dict[str, Any]] = []

    async def __call__(self, *args: Any, **kwargs: Any) -> FakeResponse:
        self.calls.append(kwargs)
        if kwargs.get("watch"):
            if not self.watches:
                await asyncio.sleep(3600)
            return FakeResponse(lines=self.watches.pop(0))
        return FakeResponse(body=self.lists.pop(0))


async def run_until(informer: Informer, condition: Any) -> None:
    task = asyncio.create_task(informer.run())
    try:
        for _ in range(500):
            if condition():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("condition not reached")
    finally:
        task.cancel()


async def test_list_watch_then_410_relists_and_synthesises_deletions():
    api = ScriptedAPI(
        lists=[
            {"metadata": {"resourceVersion": "10"}, "items": [obj("a", "1"), obj("b", "2")]},
            {"metadata": {"resourceVersion": "20"}, "items": [obj("a", "15")]},
        ],
        watches=[
            [
                {"type": "MODIFIED", "object": obj("a", "11")},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
                {
                    "type": "ERROR",
                    "object": {"code": 410, "reason": "Expired", "message": "too old"},
                },
            ],
        ],
    )
    events: list[tuple[str, str]] = []
    informer = Informer(
        "test", api, handler=lambda kind, o, before: events.append((kind, o["metadata"]["name"]))
    )
    await run_until(informer, lambda: informer.relists == 2 and len(api.calls) >= 4)

    assert informer.cache == {"ns/a": obj("a", "15")}  # b vanished while we were away
    assert events == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("MODIFIED", "a"),
        ("DELETED", "b"),  # synthesised on re-list
        ("MODIFIED", "a"),
    ]
    first_watch, second_watch = [c for c in api.calls if c.get("watch")][:2]
    assert first_watch["resource_version"] == "10"
    assert first_watch["allow_watch_bookmarks"] is True
    assert 300 <= first_watch["timeout_seconds"] <= 600
    assert second_watch["resource_version"] == "20"  # from the re-list, not the stale stream


async def test_a_watch_that_ends_resumes_from_the_last_resource_version():
    api = ScriptedAPI(
        lists=[{"metadata": {"resourceVersion": "10"}, "items": []}],
        watches=[[{"type": "ADDED", "object": obj("c", "13")}], []],
    )
    informer = Informer("test", api)
    await run_until(informer, lambda: len([c for c in api.calls if c.get("watch")]) >= 2)
    watches = [c for c in api.calls if c.get("watch")]
    assert watches[1]["resource_version"] == "13"
    assert informer.relists == 1  # no re-list for a clean end of stream
    assert informer.synced.is_set()


async def test_an_error_answer_to_a_list_never_reads_as_an_empty_list():
    """A 403 or 500 on a re-list must not synthesise deletions of every cached object."""

    class Failing(FakeResponse):
        status = 500
        reason = "Internal Server Error"

    calls = 0

    async def list_func(*args: Any, **kwargs: Any) -> FakeResponse:
        nonlocal calls
        calls += 1
        if calls == 1:
            return FakeResponse({"metadata": {"resourceVersion": "1"}, "items": [obj("a", "1")]})
        return Failing({"kind": "Status", "message": "etcd is down"})

    informer = Informer("jobs", list_func)
    deleted: list[str] = []
    informer.add_handler(lambda kind, o, before: deleted.append(kind) if kind == "DELETED" else 0)
    await informer._list()
    with pytest.raises(ApiException):
        await informer._list()
    assert deleted == [] and list(informer.cache) == ["ns/a"]


def test_cached_objects_drop_what_the_operator_never_reads():
    from gitea_runner_operator.objects.slim import slim_pod, strip_managed_fields

    pod = {
        "metadata": {
            "name": "p",
            "labels": {"gitea.bpg.pw/runnergroup-name": "ci", "job-name": "j"},
            "managedFields": [{"big": "x" * 1000}],
        },
        "spec": {"containers": [{"name": "runner"}]},
        "status": {"phase": "Running"},
    }
    slim = slim_pod(pod)
    assert slim == {
        "metadata": {
            "name": "p",
            "labels": {"gitea.bpg.pw/runnergroup-name": "ci", "job-name": "j"},
        },
        "status": {"phase": "Running"},
    }
    assert "managedFields" in pod["metadata"]  # the original is not modified
    job = strip_managed_fields({"metadata": {"name": "j", "managedFields": []}, "spec": {}})
    assert job == {"metadata": {"name": "j"}, "spec": {}}


def test_a_runner_pod_is_kept_without_the_kubelets_bookkeeping_yet_reads_the_same():
    """A running Pod's status as a kubelet writes it is mostly images, ids, IPs, resources
    and mounts; the cache keeps what the views read, and every view answers the same."""

    from gitea_runner_operator.objects.disruption import loss_cause
    from gitea_runner_operator.objects.slim import slim_pod
    from gitea_runner_operator.objects.views import (
        job_view,
        pod_problem,
        pod_started_at,
        unschedulable_since,
    )

    def container(name: str, state: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": name, "state": state, "ready": True, "restartCount": 1, "started": True,
            "lastState": {"terminated": {"exitCode": 137, "reason": "Error"}},
            "image": "docker.io/gitea/act_runner:0.2.11", "imageID": "sha256:" + "a" * 64,
            "containerID": "containerd://" + "b" * 64,
            "resources": {"limits": {"cpu": "2"}}, "allocatedResources": {"cpu": "2"},
            "volumeMounts": [{"name": f"v{i}", "mountPath": f"/m/{i}"} for i in range(8)],
            "user": {"linux": {"uid": 1000, "gid": 1000, "supplementalGroups": [1000]}},
        }  # fmt: skip

    pod = {
        "metadata": {"name": "ci-abc-1-x", "namespace": "team-a", "uid": "u",
                     "labels": {"batch.kubernetes.io/job-name": "ci-abc-1"},
                     "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"},
                     "deletionTimestamp": "2026-01-01T00:10:00Z"},
        "spec": {"containers": [{"name": "runner", "env": ["x"] * 50}]},
        "status": {
            "phase": "Running", "hostIP": "10.0.0.1", "podIP": "10.1.0.1", "qosClass": "Burstable",
            "podIPs": [{"ip": "10.1.0.1"}], "hostIPs": [{"ip": "10.0.0.1"}],
            "startTime": "2026-01-01T00:00:00Z",
            "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                 "message": "Eviction API", "lastTransitionTime": "2026-01-01T00:09:00Z",
                 "lastProbeTime": None},
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "lastTransitionTime": "2026-01-01T00:00:01Z"},
            ],
            "initContainerStatuses": [container("gro-register", {"waiting": {
                "reason": "ErrImageNeverPull", "message": "not present"}})],
            "containerStatuses": [
                container("runner", {"running": {"startedAt": "2026-01-01T00:00:05Z"}}),
                container("dind", {"running": {"startedAt": "2026-01-01T00:00:04Z"}}),
            ],
        },
    }  # fmt: skip
    slim = slim_pod(pod)
    for read in (loss_cause, pod_problem, pod_started_at, unschedulable_since):
        assert read(slim) == read(pod), read.__name__
    job = {"metadata": {"name": "ci-abc-1", "creationTimestamp": "2026-01-01T00:00:00Z"}}
    assert job_view(job, [slim]) == job_view(job, [pod])
    assert len(json.dumps(slim)) < len(json.dumps(pod)) / 2


def test_a_tenants_pod_labels_and_annotations_are_not_cached():
    """``spec.template`` may give every runner Pod 256 KiB of annotations and many labels:
    the cache keeps only the keys the operator reads, so a few thousand such Pods cost what
    plain ones do."""
    from gitea_runner_operator.kube.cache import group_key_of_owned
    from gitea_runner_operator.objects.slim import slim_pod
    from gitea_runner_operator.objects.views import pods_by_job

    ours = {"gitea.bpg.pw/runnergroup-name": "ci", "gitea.bpg.pw/managed-by": "gro"}
    pod = {
        "metadata": {
            "name": "ci-1-x", "namespace": "team-a", "uid": "u", "resourceVersion": "7",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "deletionTimestamp": "2026-01-01T00:10:00Z",
            "labels": {**ours, "batch.kubernetes.io/job-name": "ci-1",
                       **{f"tenant.example/l{i}": "v" * 63 for i in range(500)}},
            "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
                            "gitea.bpg.pw/took-job": "true",
                            "tenant.example/blob": "x" * 256 * 1024},
        },
        "status": {"phase": "Running"},
    }  # fmt: skip
    slim = slim_pod(pod)
    assert len(json.dumps(slim)) < 1024
    meta = slim["metadata"]
    assert meta["labels"] == {**ours, "batch.kubernetes.io/job-name": "ci-1"}
    assert meta["annotations"] == {
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
        "gitea.bpg.pw/took-job": "true",
    }
    assert (meta["deletionTimestamp"], meta["uid"], meta["resourceVersion"]) == (
        "2026-01-01T00:10:00Z", "u", "7",
    )  # fmt: skip
    assert group_key_of_owned(slim) == "team-a/ci"
    assert list(pods_by_job([slim])) == ["ci-1"]


def test_a_runnergroup_is_cached_without_last_applied_or_a_tenants_annotations():
    """``kubectl apply`` copies the whole manifest into an annotation and a tenant may add
    256 KiB more: the cache keeps the spec, the status and the identity, no label or
    annotation (the operator reads none of a group's)."""
    from gitea_runner_operator.api.detach import marks
    from gitea_runner_operator.kube.cache import spec_changed
    from gitea_runner_operator.objects.slim import slim_group

    spec = {"gitea": {"url": "https://gitea.example"}, "labels": ["ubuntu-latest"]}
    group = {
        "apiVersion": "gitea.bpg.pw/v1alpha1", "kind": "RunnerGroup",
        "metadata": {
            "name": "ci", "namespace": "team-a", "uid": "u", "generation": 3,
            "labels": {"app": "ci"}, "finalizers": ["gitea.bpg.pw/finalizer"],
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": json.dumps({"spec": spec}),
                "tenant.example/blob": "x" * 256 * 1024,
                "gitea.bpg.pw/note": "kept",
            },
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": spec,
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip
    slim = slim_group(group)
    assert len(json.dumps(slim)) < 1024
    # The operator reads no label or annotation of a group, its own prefix's included,
    # except the uninstall hook's detach mark (api/detach.py).
    assert "annotations" not in slim["metadata"] and "labels" not in slim["metadata"]
    assert (slim["spec"], slim["status"]) == (group["spec"], group["status"])
    kept = ("name", "namespace", "uid", "generation", "finalizers")
    assert {k: slim["metadata"][k] for k in kept} == {k: group["metadata"][k] for k in kept}
    assert "managedFields" not in slim["metadata"] and "managedFields" in group["metadata"]
    assert not spec_changed("MODIFIED", slim, slim_group(group))
    marked = {**group, "metadata": {**group["metadata"], "annotations": {
        **group["metadata"]["annotations"], **marks(1.0e9, 1.0e9 + 60)}}}  # fmt: skip
    assert slim_group(marked)["metadata"]["annotations"] == marks(1.0e9, 1.0e9 + 60)
    assert spec_changed("MODIFIED", slim_group(marked), slim)  # the hook's mark wakes the group


def test_cached_objects_share_their_keys_and_repeated_values_not_their_own():
    """Two Pods decoded apart hold one copy of each key and repeated value (a fill's
    thousands of Pods repeat them all), and a copy of their own of what is theirs."""
    from gitea_runner_operator.objects.slim import slim_pod

    def decoded(name: str) -> dict[str, Any]:
        return json.loads(json.dumps({
            "metadata": {"name": name, "labels": {"gitea.bpg.pw/runnergroup-name": "ci"}},
            "status": {"phase": "Running", "message": "the kubelet's words",
                       "conditions": [{"type": "Ready", "status": "True"}]},
        }))  # fmt: skip

    a, b = slim_pod(decoded("ci-1-a")), slim_pod(decoded("ci-2-b"))
    assert a["status"]["phase"] is b["status"]["phase"]
    ca, cb = a["status"]["conditions"][0], b["status"]["conditions"][0]
    assert ca["status"] is cb["status"] and next(iter(ca)) is next(iter(cb))
    assert a["status"]["message"] == b["status"]["message"]
    assert a["status"]["message"] is not b["status"]["message"]  # not a repeated field


def test_the_shared_strings_table_is_bounded_and_never_holds_long_text():
    """A tenant cannot grow the table: it holds at most its limit, and past it strings are
    kept as they come; nothing longer than SHARED_UP_TO goes in."""
    from gitea_runner_operator.objects.slim import SHARED_UP_TO, _Table

    table = _Table(limit=3)
    long = "x" * (SHARED_UP_TO + 1)
    assert table.get(long) is long and len(table) == 0
    for text in ("a1", "b1", "c1", "d1"):
        table.get("".join(text))
    assert len(table) == 3
    fresh = "".join(["d", "1"])
    assert table.get(fresh) is fresh  # full: kept as it came
    again = "".join(["a", "1"])
    assert table.get(again) == "a1" and table.get(again) is not again  # the table's copy


def test_a_runner_job_is_kept_without_its_spec_yet_reads_the_same():
    """The Job informer keeps identity, labels, our annotations and conditions, never the
    tenant's Pod template, and the runner's view of it is unchanged."""
    from gitea_runner_operator.objects.slim import slim_job
    from gitea_runner_operator.objects.views import job_view

    job = {
        "metadata": {
            "name": "ci-abc-1",
            "namespace": "team-a",
            "uid": "u",
            "resourceVersion": "5",
            "labels": {"gitea.bpg.pw/runnergroup-name": "ci"},
            "annotations": {"gitea.bpg.pw/took-job": "true", "big": "x" * 10_000},
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "x" * 10_000}],
        },
        "spec": {"template": {"spec": {"containers": [{"name": "runner", "env": ["x"] * 500}]}}},
        "status": {
            "conditions": [{"type": "Failed", "status": "True", "message": "x" * 1000}],
            "startTime": "2026-01-01T00:00:01Z",
        },
    }
    slim = slim_job(job)
    assert "spec" not in slim and "managedFields" not in slim["metadata"]
    assert slim["metadata"]["annotations"] == {"gitea.bpg.pw/took-job": "true"}
    assert len(repr(slim)) < 600
    assert job_view(slim, []) == job_view(job, [])
