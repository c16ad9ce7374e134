"""The operator's RBAC from manifests/: enough to do its job (every test in this suite runs
the operator with its ServiceAccount's token), and not a Secret more."""

from __future__ import annotations

import pytest

from tests.support import manifests
from tests.support.launcher import OPERATOR_NS, OPERATOR_SA
from tests.support.testbed import (
    delete_namespace,
    group_status,
    make_namespace,
    make_secret,
    make_tokens,
    ready,
    runner_group,
    runner_jobs,
    unique,
    wait_until,
)
from tests.testbed.kube import KubeError

pytestmark = pytest.mark.integration


def test_operator_cannot_read_secrets_where_no_team_allowed_it(kube, cluster):
    ns = unique("private")
    make_namespace(kube, ns, privileged=False)
    try:
        make_secret(kube, ns, "database", {"password": "hunter2"})
        operator = cluster.kube_client(token=kube.create_token(OPERATOR_NS, OPERATOR_SA))
        for path in (
            f"/api/v1/namespaces/{ns}/secrets/database",
            f"/api/v1/namespaces/{ns}/secrets",
            "/api/v1/secrets",
        ):
            with pytest.raises(KubeError) as err:
                operator.get(path)
            assert err.value.status == 403, path
    finally:
        delete_namespace(kube, ns)


def test_group_in_a_namespace_without_secret_access_says_so(
    kube, cluster, gitea_target, start_operator
):
    ns = make_namespace(kube, unique("locked"))
    try:
        make_tokens(kube, ns, cluster, gitea_target)
        start_operator(ns)
        manifests.apply(
            kube, runner_group("locked", target=gitea_target, url=cluster.gitea_url), namespace=ns
        )
        cond = wait_until(
            lambda: (c := ready(group_status(kube, ns, "locked"))).get("status") == "False" and c,
            what="SecretForbidden",
        )
        assert cond["reason"] == "SecretForbidden"
        assert "spec.authToken.secretRef" in cond["message"]
        assert "gitea-runner-operator-secrets" in cond["message"]
        assert runner_jobs(kube, ns, "locked") == []
    finally:
        delete_namespace(kube, ns)
