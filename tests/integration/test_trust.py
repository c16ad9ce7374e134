"""The operator trusts spec.gitea.caBundle for its own Gitea calls: a real Gitea behind an
HTTPS front whose certificate is signed by a private CA (made here with openssl). Without the
bundle the operator refuses the certificate; with it, it works."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support import manifests
from tests.support.faulty_gitea import FaultyGitea
from tests.support.testbed import (
    group_status,
    make_tokens,
    ready,
    runner_group,
    wait_until,
)

pytestmark = pytest.mark.integration


def private_ca(tmp: Path) -> tuple[str, str, str]:
    """A CA and a server certificate for 127.0.0.1 signed by it: (ca, cert, key) paths."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=tmp)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=gro test CA",
        "-keyout", "ca.key", "-out", "ca.crt")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", "server.key", "-out", "server.csr")  # fmt: skip
    (tmp / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.crt")  # fmt: skip
    return str(tmp / "ca.crt"), str(tmp / "server.crt"), str(tmp / "server.key")


def test_the_operator_trusts_the_ca_bundle_for_gitea(
    kube, cluster, team_namespace, gitea_target, start_operator, tmp_path
):
    ns = team_namespace
    ca, cert, key = private_ca(tmp_path)
    make_tokens(kube, ns, cluster, gitea_target)
    manifests.apply(
        kube,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "corp-ca"},
            "data": {"ca.crt": Path(ca).read_text()},
        },
        namespace=ns,
    )
    with FaultyGitea(upstream=cluster.gitea_url, tls=(cert, key)) as https:
        start_operator(ns)
        manifests.apply(
            kube, runner_group("untrusted", target=gitea_target, url=https.url), namespace=ns
        )
        refused = wait_until(
            lambda: (
                (c := ready(group_status(kube, ns, "untrusted"))).get("status") == "False" and c
            ),
            what="untrusted refused",
        )
        assert refused["reason"] == "GiteaUnreachable"
        trusted = runner_group("trusted", target=gitea_target, url=https.url)
        trusted["spec"]["gitea"]["caBundle"] = {
            "configMapKeyRef": {"name": "corp-ca", "key": "ca.crt"}
        }
        manifests.apply(kube, trusted, namespace=ns)
        cond = wait_until(
            lambda: (c := ready(group_status(kube, ns, "trusted"))).get("status") == "True" and c,
            what="trusted ready over HTTPS",
        )
        assert cond["reason"] in ("Polling", "AtCapacity")
        assert any(r.authorized for r in https.requests)  # it really went through the front


def test_the_operator_calls_gitea_through_the_proxy_its_environment_names(
    kube, cluster, team_namespace, gitea_target, start_operator
):
    """HTTP_PROXY/HTTPS_PROXY/NO_PROXY, as every cluster tool honours them: a forward proxy
    on loopback sees the operator's requests to Gitea (the proxy then passes them on)."""
    ns = team_namespace
    make_tokens(kube, ns, cluster, gitea_target)
    with FaultyGitea(upstream=cluster.gitea_url) as proxy:
        start_operator(ns, env={"HTTP_PROXY": proxy.url, "http_proxy": proxy.url})
        manifests.apply(
            kube, runner_group("proxied", target=gitea_target, url=cluster.gitea_url), namespace=ns
        )
        wait_until(
            lambda: ready(group_status(kube, ns, "proxied")).get("status") == "True",
            what="ready through the proxy",
        )
        through = [r.path for r in proxy.requests if r.path.startswith(cluster.gitea_url)]
        assert through and any("/actions/jobs" in p for p in through), proxy.requests[:3]
