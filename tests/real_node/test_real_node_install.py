"""The operator as users get it: its own image (built here, tests/testbed/operator_image.py)
installed by ``helm install`` onto the real node, a team set up as the README says, a real
workflow run to success, then two replicas failing over, a graceful stop, a ``helm upgrade``,
a ``helm uninstall`` that leaves the groups (deregistered, released) for a reinstall that
serves them again, a hook that fails without leaving its rights behind, and a ``helm
uninstall`` with ``uninstall.deleteGroups`` that deletes them.

One release is shared by the steps, in order (a module-scoped fixture): each test is one
step a user takes and asserts what they would notice; every step's time is printed, and only
the two bounds a user relies on are asserted (a stop within the Pod's grace period, a takeover
before the released Lease could have expired). The operator Pods reach the API server through
the ``kubernetes`` Service's ClusterIP, which the testbed bridges on the node
(tests/testbed/service_bridge.py: the node has no kube-proxy).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gitea_runner_operator import __version__
from gitea_runner_operator.api.detach import ANNOTATIONS as DETACH_ANNOTATIONS
from gitea_runner_operator.reconcile.steps.teardown import FINALIZER
from tests.support.install import CHART, TOLERATION, Install, step
from tests.support.testbed import GROUPS, runner_jobs, wait_until
from tests.testbed import build, operator_image
from tests.testbed.realnode import NODE_LABEL, NODE_NAME
from tests.testbed.service_bridge import bridged_kubernetes_service

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.real_node]

UPGRADE_TAG = f"{__version__}-upgrade"
IMAGE = f"gitea-runner-operator:{__version__}"
LEASE_SECONDS = 15  # the operator's default --lease-duration


@pytest.fixture(scope="module")
def install(testbed: Any, real_node: Any, tmp_path_factory: Any) -> Iterator[Install]:
    """The image imported under two tags, helm built, the kubernetes Service bridged; the
    release itself is installed by the first step."""
    t0 = time.monotonic()
    build.ensure_built(["helm"])
    operator_image.import_image(real_node, (UPGRADE_TAG,))
    assert testbed.gitea_url
    port = int(testbed.gitea_url.rsplit(":", 1)[1])
    from tests.testbed.sandbox import free_port

    url = f"http://{real_node.expose(port, listen_port=free_port())}"
    step("image, helm and bridge ready", t0)
    with bridged_kubernetes_service(testbed.kube, testbed.apiserver_url):
        inst = Install(
            kube=testbed.kube,
            helm_bin=build.binary("helm"),
            kubeconfig=testbed.kubeconfig,
            workdir=tmp_path_factory.mktemp("helm"),
            release="gro",
            namespace=f"gro-system-{int(time.time()) % 100000}",
            gitea=testbed.gitea_client(),
            gitea_url=url,
            node=real_node,
        )
        inst.times["start"] = time.monotonic()
        try:
            yield inst
        finally:
            with contextlib.suppress(Exception):
                inst.helm("uninstall", inst.release, "-n", inst.namespace, "--timeout", "60s")
            for ns in (inst.team, inst.namespace):
                if ns:
                    _force_delete_namespace(testbed.kube, ns)
            step("whole suite", inst.times["start"])


def _force_delete_namespace(kube: Any, ns: str) -> None:
    with contextlib.suppress(Exception):
        for g in kube.get(GROUPS.format(ns=ns))["items"]:
            path = f"{GROUPS.format(ns=ns)}/{g['metadata']['name']}"
            kube.patch(path, {"metadata": {"finalizers": None}})
    kube.delete(f"/api/v1/namespaces/{ns}")


def _values(inst: Install, **extra: Any) -> str:
    return inst.values(
        image={"repository": "gitea-runner-operator", "tag": __version__, "pullPolicy": "Never"},
        nodeSelector={NODE_LABEL: "true"},
        tolerations=[TOLERATION],
        **extra,
    )


def test_helm_install_runs_the_image_on_the_real_node_and_a_team_gets_a_green_job(install):
    t0 = time.monotonic()
    install.helm(
        "install", install.release, str(CHART), "-n", install.namespace, "--create-namespace",
        "-f", _values(install),
    )  # fmt: skip
    install.wait_rolled(1)
    (pod,) = install.pods()
    assert pod["spec"]["nodeName"] == NODE_NAME
    status = pod["status"]["containerStatuses"][0]
    assert status["image"].endswith(IMAGE) and status["restartCount"] == 0
    install.wait(install.leader, "a leader", timeout=60)
    assert install.leader() == pod["metadata"]["name"]
    step("helm install until the operator Pod is Ready and leads", t0)

    t1 = time.monotonic()
    install.setup_team()
    label = install.group("first")
    install.push("hello", label, ["echo hello from the installed operator"])
    assert install.conclusion("hello") == "success", install.report()
    assert len(install.runners("first")) == 1
    step("team setup until its first job succeeded", t1)


def test_kubectl_shows_the_group_and_explains_every_field(install):
    if not shutil.which("kubectl"):
        pytest.fail("this step reads the group as a user does, with kubectl: put it on PATH")
    header, row = install.kubectl("get", "rg", "-n", install.team, "-o", "wide").splitlines()
    assert header.split() == [
        "NAME", "SCOPE", "TARGET", "MAX", "ACTIVE", "QUEUED", "READY", "OLDEST", "WAITING",
        "AGE", "MODE", "REASON", "DOMAIN", "SERVED", "BY", "POLL", "POLL", "REASON",
    ]  # fmt: skip
    assert row.split()[:3] == ["first", "org", install.org] and "True" in row.split()
    explained = install.kubectl("explain", "runnergroup.spec.gitea")
    assert "The Gitea (or Forgejo) instance the group serves" in " ".join(explained.split())
    described = install.kubectl("describe", "rg", "first", "-n", install.team)
    assert "Conditions:" in described and "Max Active Runners:" in described


def test_two_replicas_hand_over_when_the_leader_pod_is_deleted(install):
    install.helm(
        "upgrade", install.release, str(CHART), "-n", install.namespace, "--reuse-values",
        "--set", "replicaCount=2",
    )  # fmt: skip
    install.wait_rolled(2)
    holder = install.wait(install.holder, "a leader")
    label = install.group("failover")
    t0 = time.monotonic()
    install.delete_pod(install.leader())
    install.push("during-failover", label, ["echo queued during the handover"])
    # the standby, or the Pod replacing the deleted one when it asks first: a live Pod leads
    install.wait(lambda: install.holder() not in ("", holder), "another Pod leads")
    step("leader Pod deleted until another Pod leads", t0)
    assert install.conclusion("during-failover") == "success", install.report()
    # exactly one runner for the job
    assert len(install.jobs_for(label)) == 1
    assert len(install.runners("failover")) == 1, install.runner_report("failover")
    install.wait_rolled(2)


def test_a_graceful_stop_releases_the_lease_and_a_crash_waits_for_its_expiry(install):
    holder = install.wait(install.holder, "a leader")
    leader = install.leader()
    t0 = time.monotonic()
    install.delete_pod(leader, grace=20)
    install.wait(lambda: install.holder() not in ("", holder), "another Pod leads", timeout=60)
    released = step("graceful stop: deletion until another Pod leads (Lease released)", t0)
    install.wait(lambda: install.pod_gone(leader), "the old leader stopped", timeout=40)
    stopped = step("graceful stop: deletion until the old leader's Pod is gone", t0)
    assert stopped < 20, "the leader did not stop within its grace period"
    # taken over before the old holder's Lease (15 s) could have run out: it was released
    assert released < LEASE_SECONDS

    install.wait_rolled(2)
    holder = install.wait(install.holder, "a leader")
    t1 = time.monotonic()
    # SIGKILL, as the OOM killer would: nothing is released, the Lease must expire
    install.node.ctr("tasks", "kill", "-s", "SIGKILL", install.container_id(install.leader()))
    install.wait(lambda: install.holder() not in ("", holder), "another operator leads")
    expired = step("crash (SIGKILL): until another operator leads (Lease expired)", t1)
    print(f"[install suite] takeover after release {released:.1f}s vs expiry {expired:.1f}s")
    install.wait_rolled(2)


def test_helm_upgrade_rolls_the_pods_and_loses_or_duplicates_no_job(install):
    label = install.group("upgrade")
    install.push("running", label, ["sleep 25", "echo ran across the upgrade"])
    install.wait_status("running", "in_progress", timeout=120)
    t0 = time.monotonic()
    install.helm(
        "upgrade", install.release, str(CHART), "-n", install.namespace, "--reuse-values",
        "--set", f"image.tag={UPGRADE_TAG}", "--set", "operator.logLevel=debug",
    )  # fmt: skip
    install.push("queued", label, ["echo queued during the rollout"])
    install.wait_rolled(2, image=f"gitea-runner-operator:{UPGRADE_TAG}")
    step("helm upgrade until both Pods run the new tag", t0)
    deployment = install.kube.get(
        f"/apis/apps/v1/namespaces/{install.namespace}/deployments/{install.fullname}"
    )
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--log-level=debug" in args
    assert install.conclusion("running") == "success", install.report()
    assert install.conclusion("queued") == "success", install.report()
    # one each: none lost, none duplicated
    assert len(install.jobs_for(label)) == 2
    assert len(install.runners("upgrade")) == 2, install.runner_report("upgrade")
    step("helm upgrade until both jobs succeeded", t0)


def _hook_objects(install: Install) -> list[str]:
    """The uninstall hook's objects still in the cluster: its rights must not outlive it."""
    name = f"{install.fullname}-uninstall"
    rbac, ns = "/apis/rbac.authorization.k8s.io/v1", f"namespaces/{install.namespace}"
    paths = [
        f"{rbac}/clusterroles/{name}", f"{rbac}/clusterrolebindings/{name}",
        f"{rbac}/{ns}/roles/{name}-stop", f"{rbac}/{ns}/rolebindings/{name}-stop",
        f"/api/v1/{ns}/serviceaccounts/{name}", f"/apis/batch/v1/{ns}/jobs/{name}",
    ]  # fmt: skip
    return [p for p in paths if install.kube.exists(p)]


def _registrations(install: Install) -> list[str]:
    return sorted(r["name"] for r in install.gitea.list_runners("org", owner=install.org))


def _group_objects(install: Install) -> dict[str, dict[str, Any]]:
    return {
        g["metadata"]["name"]: g for g in install.kube.get(GROUPS.format(ns=install.team))["items"]
    }


def test_helm_uninstall_leaves_the_groups_deregistered_released_and_untouched(install):
    label = install.group("busy")
    install.push("busy", label, ["sleep 15", "echo finished during the uninstall"])
    install.wait_status("busy", "in_progress", timeout=120)
    before = {
        n: (g["metadata"]["generation"], g["spec"]) for n, g in _group_objects(install).items()
    }
    t0 = time.monotonic()
    install.helm("uninstall", install.release, "-n", install.namespace, "--timeout", "5m")
    step("helm uninstall (pre-delete hook detaches the groups)", t0)
    after = _group_objects(install)
    # every group left in place, its spec untouched, with nothing of ours on it
    assert {n: (g["metadata"]["generation"], g["spec"]) for n, g in after.items()} == before
    for name, g in after.items():
        assert FINALIZER not in (g["metadata"].get("finalizers") or []), name
        assert not set(g["metadata"].get("annotations") or {}) & set(DETACH_ANNOTATIONS), name
    # the busy runner was let finish its job (drainTimeout); no registration is left
    assert install.conclusion("busy", timeout=60) == "success", install.report()
    assert _registrations(install) == []
    assert not [j for g in after for j in runner_jobs(install.kube, install.team, g)
                if (j.get("status") or {}).get("active")]  # fmt: skip
    assert install.pods() == [] and _hook_objects(install) == []


def test_a_reinstall_serves_the_groups_it_left_again(install):
    t0 = time.monotonic()
    install.helm(
        "install", install.release, str(CHART), "-n", install.namespace,
        "-f", _values(install, uninstall={"deleteGroups": True}),
    )  # fmt: skip
    install.wait_rolled(1)

    def served() -> bool:
        for g in _group_objects(install).values():
            conditions = {c["type"]: c["status"] for c in g.get("status", {}).get("conditions", [])}
            if FINALIZER not in (g["metadata"].get("finalizers") or []):
                return False
            if conditions.get("Ready") != "True":
                return False
        return True

    install.wait(served, "every group it left taken back and Ready", timeout=180)
    step("reinstall until the left groups are Ready again", t0)
    install.push("again", "gro-install-first", ["echo served after a reinstall"])
    assert install.conclusion("again") == "success", install.report()
    step("reinstall until a job on a left group succeeded", t0)


def test_a_hook_that_fails_leaves_none_of_its_rights_behind(install):
    t0 = time.monotonic()
    with pytest.raises(AssertionError) as failed:
        install.helm("uninstall", install.release, "-n", install.namespace, "--timeout", "1s")
    step("helm uninstall with a 1 s deadline, failing", t0)
    print(f"[install suite] {str(failed.value).strip().splitlines()[-1]}")
    # its rights are gone when helm returns; its Job (and the Job's Pod) may take a moment
    assert [p for p in _hook_objects(install) if "/jobs/" not in p] == []
    install.wait(lambda: _hook_objects(install) == [], "the failed hook's Job deleted", 30)
    assert install.ready_pods()  # the release stays; its operator still runs


def test_helm_uninstall_with_delete_groups_tears_them_down_and_leaves_nothing_stuck(install):
    label = install.group("busy-delete")
    install.push("busy-delete", label, ["sleep 15", "echo finished during the uninstall"])
    install.wait_status("busy-delete", "in_progress", timeout=120)
    t0 = time.monotonic()
    install.helm("uninstall", install.release, "-n", install.namespace, "--timeout", "5m")
    step("helm uninstall (pre-delete hook deletes the groups)", t0)
    assert install.groups() == []
    assert install.runners("busy-delete") == []
    assert install.conclusion("busy-delete", timeout=60) == "success", install.report()
    assert _registrations(install) == [] and _hook_objects(install) == []
    t1 = time.monotonic()
    install.kube.delete(f"/api/v1/namespaces/{install.team}")
    wait_until(
        lambda: not install.kube.exists(f"/api/v1/namespaces/{install.team}"),
        timeout=60,
        what="the team namespace deleted",
    )
    step("team namespace deletion after the uninstall", t1)


def test_a_namespace_whose_groups_outlived_the_operator_is_released_by_the_cli(install, testbed):
    """The way out when the operator is gone (uninstalled without its hook, scaled to zero)
    and a namespace with RunnerGroups is deleted: ``release-finalizers``."""
    ns = install.team + "-late"
    install.kube.post("/api/v1/namespaces", {"metadata": {"name": ns}})
    group = {
        "apiVersion": "gitea.bpg.pw/v1alpha1",
        "kind": "RunnerGroup",
        "metadata": {"name": "orphan", "finalizers": ["gitea.bpg.pw/teardown"]},
        "spec": {"scope": "org", "org": "gone", "gitea": {"url": "http://127.0.0.1:9"},
                 "labels": ["x"], "maxActiveRunners": 1,
                 "registrationToken": {"secretRef": {"name": "t", "key": "r"}},
                 "authToken": {"secretRef": {"name": "t", "key": "a"}}},
    }  # fmt: skip
    install.kube.post(GROUPS.format(ns=ns), group)
    install.kube.delete(f"/api/v1/namespaces/{ns}")
    time.sleep(3)
    ns_obj = install.kube.get(f"/api/v1/namespaces/{ns}")
    assert ns_obj["status"]["phase"] == "Terminating"  # held by the group's finalizer
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "gitea_runner_operator", "release-finalizers",
         "--kubeconfig", str(testbed.kubeconfig), "--namespace", ns],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "orphan" in out.stdout + out.stderr
    wait_until(
        lambda: not install.kube.exists(f"/api/v1/namespaces/{ns}"),
        timeout=60,
        what="the namespace deleted",
    )
    step("release-finalizers until the namespace is gone", t0)
