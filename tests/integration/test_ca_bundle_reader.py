"""The operator reads spec.gitea.caBundle with its own ServiceAccount, in a namespace whose
owner bound the secrets ClusterRole: a good bundle becomes a TLS context, a missing or bad one
a problem naming the object, and without the binding it is refused."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from gitea_runner_operator.api.refs import GiteaRef
from gitea_runner_operator.kube.configmaps import ConfigReader, ReferenceProblem
from gitea_runner_operator.kube.secret_store import SecretStore
from gitea_runner_operator.poll.trust import GiteaTrust
from tests.support import manifests
from tests.support.builders import TEST_CA
from tests.support.launcher import OPERATOR_NS, OPERATOR_SA
from tests.support.testbed import make_namespace, unique

pytestmark = pytest.mark.integration


def gitea_with(kind: str, name: str, key: str = "ca.crt") -> GiteaRef:
    return GiteaRef.model_validate(
        {"url": "https://g", "caBundle": {kind: {"name": name, "key": key}}}
    )


async def operator_api(cluster: Any, tmp_path: Path) -> client.ApiClient:
    """An API client with the operator's ServiceAccount token (never the admin's)."""
    token = cluster.kube.create_token(OPERATOR_NS, OPERATOR_SA)
    kubeconfig = cluster.kubeconfig_for_token(token, tmp_path / "kubeconfig")
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return client.ApiClient(cfg)


async def problem(reader: ConfigReader, ns: str, gitea: GiteaRef) -> tuple[str, str]:
    with pytest.raises(ReferenceProblem) as err:
        await GiteaTrust(reader).context_for(ns, gitea)
    return err.value.problem.reason, err.value.problem.message


async def test_the_operator_reads_a_ca_bundle_where_allowed(
    kube, cluster, team_namespace, tmp_path
):
    ns = team_namespace
    for name, data in (("good-ca", {"ca.crt": TEST_CA}), ("bad-ca", {"ca.crt": "not a PEM"})):
        manifests.apply(
            kube,
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data},
            namespace=ns,
        )
    api = await operator_api(cluster, tmp_path)
    reader = ConfigReader(api, SecretStore(api))
    try:
        assert isinstance(
            (await GiteaTrust(reader).context_for(ns, gitea_with("configMapKeyRef", "good-ca")))[0],
            ssl.SSLContext,
        )
        reason, message = await problem(reader, ns, gitea_with("configMapKeyRef", "bad-ca"))
        assert reason == "CABundleInvalid"
        assert f"ConfigMap {ns}/bad-ca" in message
        reason, message = await problem(reader, ns, gitea_with("configMapKeyRef", "no-such"))
        assert (reason, f"ConfigMap {ns}/no-such not found" in message) == (
            "CABundleNotFound",
            True,
        )
        # A Secret: used only if opted in, and every failure reads alike.
        missing = await problem(reader, ns, gitea_with("secretKeyRef", "no-such"))
        manifests.apply(
            kube,
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "unlabelled-ca"},
             "stringData": {"ca.crt": TEST_CA}},
            namespace=ns,
        )  # fmt: skip
        unlabelled = await problem(reader, ns, gitea_with("secretKeyRef", "unlabelled-ca"))
        assert missing[0] == unlabelled[0] == "CABundleUnusable"
        assert missing[1].replace("no-such", "X") == unlabelled[1].replace("unlabelled-ca", "X")
        manifests.apply(
            kube,
            {"apiVersion": "v1", "kind": "Secret",
             "metadata": {"name": "labelled-ca",
                          "labels": {"gitea.bpg.pw/credentials": "true"}},
             "stringData": {"ca.crt": TEST_CA}},
            namespace=ns,
        )  # fmt: skip
        context, _ = await GiteaTrust(reader).context_for(
            ns, gitea_with("secretKeyRef", "labelled-ca")
        )
        assert isinstance(context, ssl.SSLContext)

        private = make_namespace(kube, unique("private"), privileged=False)
        try:
            manifests.apply(
                kube,
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "good-ca"},
                 "data": {"ca.crt": TEST_CA}},
                namespace=private,
            )  # fmt: skip
            reason, message = await problem(
                reader, private, gitea_with("configMapKeyRef", "good-ca")
            )
            assert reason == "CABundleForbidden"
            assert "gitea-runner-operator-secrets" in message
        finally:
            kube.delete(f"/api/v1/namespaces/{private}")
    finally:
        await api.close()
