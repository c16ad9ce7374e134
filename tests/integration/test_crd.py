"""The CRD from manifests/ on a real API server: the schema and CEL rules reject what the
operator could not serve, with the CRD's own messages."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support import manifests
from tests.support.builders import group
from tests.support.testbed import GROUPS, api_message, rejection, wait_until
from tests.testbed.kube import KubeError

pytestmark = pytest.mark.integration


def test_valid_group_is_accepted_with_defaults(kube, team_namespace):
    created = kube.post(GROUPS.format(ns=team_namespace), group("ok"))
    spec = created["spec"]
    assert "image" not in spec  # each mode has its own image
    assert spec["mode"] == "dind-userns"  # the default for new groups (issue 43)
    assert spec["pollInterval"] == "15s"
    assert spec["idleTimeout"] == "10m"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"scope": "org", "repo": None, "org": None},
            "spec.org is required when scope is org or repo",
        ),
        ({"repo": None}, "spec.repo is required when scope is repo"),
        ({"scope": "global"}, "spec.org and spec.repo must be empty when scope is global"),
        ({"scope": "team"}, 'Unsupported value: "team"'),
        ({"maxActiveRunners": 0}, "spec.maxActiveRunners: Invalid value: 0"),
        ({"gitea": {"url": "ftp://gitea"}}, "spec.gitea.url"),
        ({"gitea": {"url": "https://bot:s3cret@gitea.example.com"}}, "spec.gitea.url"),
        ({"labels": []}, "spec.labels"),
        ({"labels": ["a,b"]}, "spec.labels[0]"),
        ({"pollInterval": "1s"}, "spec.pollInterval must be between 5s and 10m"),
        ({"idleTimeout": "5s"}, "spec.idleTimeout must be between 1m and 24h"),
        ({"authToken": None}, "spec.authToken: Required value"),
        # The default runner (gitea/runner 1.0.8) refuses to register with these labels.
        ({"labels": ["k8s:kubernetes://busybox"]}, "list kubernetes in spec.labelSchemas"),
        ({"labels": ["linux", "app:infra"]}, "a label name cannot contain a colon"),
        ({"labelSchemas": ["docker"]}, "spec.labelSchemas must keep host and docker"),
        ({"minIdleRunners": 4}, "spec.minIdleRunners must not exceed spec.maxActiveRunners"),
        ({"drainTimeout": "25h"}, "spec.drainTimeout must be at most 24h"),
        ({"startupTimeout": "10s"}, "spec.startupTimeout must be between 1m and 24h"),
    ],
)
def test_invalid_groups_are_rejected_with_the_crds_message(kube, team_namespace, spec, message):
    assert message in rejection(kube, team_namespace, group("bad", **spec))


def test_long_names_are_rejected(kube, team_namespace):
    assert "at most 45 characters" in rejection(kube, team_namespace, group("x" * 46))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"scope": "org", "repo": None}, "spec.scope is immutable"),
        ({"org": "other"}, "spec.org is immutable"),
        ({"repo": "other"}, "spec.repo is immutable"),
        ({"gitea": {"url": "https://elsewhere.example.com"}}, "spec.gitea.url is immutable"),
    ],
)
def test_target_cannot_change_after_creation(kube, team_namespace, change, message):
    path = GROUPS.format(ns=team_namespace)
    created = kube.post(path, group("moving"))
    edited = copy.deepcopy(created)
    for key, value in change.items():
        if value is None:
            edited["spec"].pop(key, None)
        else:
            edited["spec"][key] = value
    with pytest.raises(KubeError) as err:
        kube.put(f"{path}/moving", edited)
    assert err.value.status == 422
    assert message in api_message(err.value)


def test_other_fields_can_change(kube, team_namespace):
    path = GROUPS.format(ns=team_namespace)
    created = kube.post(path, group("growing"))
    created["spec"]["maxActiveRunners"] = 9
    created["spec"]["labels"] = ["linux"]
    updated = kube.put(f"{path}/growing", created)
    assert updated["spec"]["maxActiveRunners"] == 9
    assert updated["metadata"]["generation"] == 2


def test_status_is_a_subresource(kube, team_namespace):
    path = GROUPS.format(ns=team_namespace)
    created = kube.post(path, {**group("statusful"), "status": {"activeRunners": 7}})
    assert "status" not in created or created["status"].get("activeRunners") != 7
    assert manifests.object_path(created, team_namespace).endswith("/statusful")


def test_a_kubernetes_label_is_accepted_for_a_runner_that_understands_it(kube, team_namespace):
    obj = group(
        "k8s", labels=["k8s:kubernetes://busybox"], labelSchemas=["host", "docker", "kubernetes"]
    )
    created = kube.post(GROUPS.format(ns=team_namespace), obj)
    assert created["spec"]["labelSchemas"] == ["host", "docker", "kubernetes"]


def test_registration_token_is_required_unless_the_forge_is_forgejo(kube, team_namespace):
    message = rejection(kube, team_namespace, group("no-token", registrationToken=None))
    assert "spec.registrationToken is required unless spec.gitea.flavor is forgejo" in message
    forgejo = {"url": "https://forgejo.example.com", "flavor": "forgejo"}
    created = kube.post(
        GROUPS.format(ns=team_namespace),
        group("forgejo", registrationToken=None, gitea=forgejo),
    )
    assert created["spec"]["gitea"]["flavor"] == "forgejo"
    defaulted = kube.post(GROUPS.format(ns=team_namespace), group("auto"))
    assert defaulted["spec"]["gitea"]["flavor"] == "auto"
    bad = {"url": "https://forgejo.example.com", "flavor": "gogs"}
    assert 'Unsupported value: "gogs"' in rejection(kube, team_namespace, group("gogs", gitea=bad))


def _crd_with_mode_default(default: str, enum: list[str]) -> dict[str, Any]:
    (crd,) = manifests.load("crd.yaml")
    crd = copy.deepcopy(crd)
    props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    props["properties"]["mode"] |= {"default": default, "enum": enum}
    return crd


def _wait_default(kube: Any, ns: str, name: str, mode: str) -> None:
    """Until a new group of that name gets ``mode`` by default (the API server has read the
    CRD that was just applied)."""

    def defaulted() -> bool:
        probe = kube.request("POST", f"{GROUPS.format(ns=ns)}?dryRun=All", group(name))
        return bool(probe["spec"]["mode"] == mode)

    wait_until(defaulted, timeout=30, what=f"new groups default to {mode}")


def test_a_group_created_before_dind_userns_was_the_default_keeps_its_mode(kube, team_namespace):
    """Issue 43: the new default moves no group. The CRD writes its default into each object
    it creates, so a group created under the previous release's CRD (default dind-rootless)
    still reads dind-rootless once the new CRD is applied, and after a GitOps tool applies the
    same manifest again (server-side apply, no mode in it): only its spec changes its mode."""
    ns = team_namespace
    previous = _crd_with_mode_default("dind-rootless", ["dind-rootless", "dind", "host"])
    (current,) = manifests.load("crd.yaml")
    try:
        manifests.apply(kube, previous)
        _wait_default(kube, ns, "probe-old", "dind-rootless")
        body = group("old-group")
        applied = kube.patch(
            f"{GROUPS.format(ns=ns)}/old-group?fieldManager=flux&force=true", body, kind="apply"
        )
        assert applied["spec"]["mode"] == "dind-rootless"
    finally:
        manifests.apply(kube, current)
    _wait_default(kube, ns, "probe-new", "dind-userns")
    path = f"{GROUPS.format(ns=ns)}/old-group"
    assert kube.get(path)["spec"]["mode"] == "dind-rootless"
    # the GitOps tool applies the same manifest again: still no mode in it
    again = kube.patch(f"{path}?fieldManager=flux&force=true", group("old-group"), kind="apply")
    assert again["spec"]["mode"] == "dind-rootless"
    # a new group, from the same manifest under another name, gets the new default
    fresh = kube.patch(
        f"{GROUPS.format(ns=ns)}/new-group?fieldManager=flux&force=true",
        group("new-group"),
        kind="apply",
    )
    assert fresh["spec"]["mode"] == "dind-userns"
