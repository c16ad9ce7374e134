"""The hostile tenants of tests/benchmarks/hostile.py, as a tenant would set them up: Secrets of
1 MiB named by templates, CA bundles in many texts, another application's ``db-cache``
objects next to a group ``db`` that turns ``spec.cache`` on and off, and groups whose
``spec.gitea.url`` is a hostile forge (hostile_servers.HostileForge)."""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import tempfile
import time

from tests.benchmarks import common
from tests.benchmarks.hostile_gitea import GiteaProcess
from tests.benchmarks.hostile_servers import MODES
from tests.support import manifests
from tests.support.testbed import allow_cache, make_secret
from tests.testbed.kube import KubeClient

FOREIGN = {
    "Service": "/api/v1/namespaces/{ns}/services",
    "PersistentVolumeClaim": "/api/v1/namespaces/{ns}/persistentvolumeclaims",
    "Secret": "/api/v1/namespaces/{ns}/secrets",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
}


def prepare_evil(kube: KubeClient, args: argparse.Namespace) -> None:
    """What the hostile tenants set up before they strike: big Secrets, CA bundles, and the
    other application's ``db-cache`` objects."""
    for i in range(args.secrets):
        make_secret(kube, "evil-secrets", f"big-{i}", {"blob": os.urandom(500_000).hex()})
    certs = _certificates(4)
    for i in range(args.ca_groups):
        text = f"# variant {i}\n" + "\n".join(reversed(certs[: 1 + i % 4])) + "\n" * (i % 3)
        manifests.apply(
            kube,
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"ca-{i}"},
                "data": {"ca.crt": text},
            },
            "evil-ca",
        )
    allow_cache(kube, "evil-cache")
    meta = {"name": "db-cache", "labels": {"app": "db"}}
    objects = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta,
            "spec": {"ports": [{"port": 5432}], "selector": {"app": "db"}},
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": meta,
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
        {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "stringData": {"pw": "x"}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "db"}},
                "template": {
                    "metadata": {"labels": {"app": "db"}},
                    "spec": {"containers": [{"name": "db", "image": "db.invalid/db"}]},
                },
            },
        },
    ]
    for obj in objects:
        kube.post(FOREIGN[obj["kind"]].format(ns="evil-cache"), obj)


def apply_evil_groups(
    kube: KubeClient, fake: GiteaProcess, forge_url: str, args: argparse.Namespace
) -> None:
    """The hostile tenants' groups, for the attacks ``args.attacks`` names."""
    attacks = set(args.attacks.split(","))
    for mode in MODES if "forge" in attacks else ():
        for k in range(2):
            body = common.group(f"{mode}-{k}", "evil", f"{forge_url}/{mode}", ["e"])
            if k == 1 and mode == "tiny":
                body["spec"]["gitea"]["flavor"] = "forgejo"
            manifests.apply(kube, body, "evil-forge")
    for i in range(max(1, args.secrets // 2) if "secrets" in attacks else 0):
        names = [f"big-{(2 * i + j) % args.secrets}" for j in range(6)]
        template = {
            "spec": {
                "volumes": [
                    {"name": f"v{j}", "secret": {"secretName": n}} for j, n in enumerate(names)
                ]
            }
        }
        fake.queue("evil", "app", (f"s{i}",), 2)
        manifests.apply(
            kube,
            common.group(f"s{i}", "evil", fake.url, [f"s{i}"], template=template),
            "evil-secrets",
        )
    for i in range(args.ca_groups if "ca" in attacks else 0):
        gitea = {
            "url": fake.url,
            "caBundle": {"configMapKeyRef": {"name": f"ca-{i}", "key": "ca.crt"}},
        }
        body = common.group(f"ca-{i}", "evil", fake.url, ["e"])
        body["spec"]["gitea"] = gitea
        manifests.apply(kube, body, "evil-ca")
    for g in range(args.label_groups if "labels" in attacks else 0):
        offered = [f"ubuntu-{g}-{k}" for k in range(64)]  # the spec's cap: 64 labels
        body = common.group(f"labels-{g}", "evil", f"{forge_url}/labels", offered)
        manifests.apply(kube, body, "evil-forge")
    # Issue 45: many groups of one tenant at the caps, each its own org of one Gitea.
    for k in range(args.caps_groups if "caps" in attacks else 0):
        body = common.group(f"caps-{k}", f"caps{k}", f"{forge_url}/caps", ["e"])
        manifests.apply(kube, body, "evil-caps")
    # Issue 45: many Gitea URLs, each listing 4,000 queued jobs of a label each.
    for n in range(args.url_groups if "urls" in attacks else 0):
        body = common.group(f"url-{n}", "evil", f"{forge_url}/labels{n}", ["e"])
        manifests.apply(kube, body, "evil-urls")
    # Issue 45: a group whose token is revoked while it is being deleted (hostile.py).
    if "revoke" in attacks:
        body = common.group("revoked", "evil", f"{forge_url}/revoke", ["rv"], maxActiveRunners=1)
        manifests.apply(kube, body, "evil-revoke")
    if "cache" not in attacks:
        return
    cache = {"enabled": True}
    manifests.apply(kube, common.group("db", "evil", fake.url, ["e"], cache=cache), "evil-cache")


def set_cache(kube: KubeClient, enabled: bool) -> None:
    with contextlib.suppress(Exception):  # no group db: the cache attack is not run
        kube.patch(
            "/apis/gitea.bpg.pw/v1alpha1/namespaces/evil-cache/runnergroups/db",
            {"spec": {"cache": {"enabled": enabled}}},
        )


def foreign_objects(kube: KubeClient, ns: str) -> dict[str, str]:
    """kind -> uid of the other application's ``db-cache`` objects that exist now."""
    out = {}
    for kind, path in FOREIGN.items():
        with contextlib.suppress(Exception):
            out[kind] = kube.get(f"{path.format(ns=ns)}/db-cache")["metadata"]["uid"]
    return out


def _certificates(n: int) -> list[str]:
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n):
            subprocess.run(
                [
                    "openssl",
                    "req",
                    "-x509",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-days",
                    "2",
                    "-subj",
                    f"/CN=hostile-ca-{i}",
                    "-keyout",
                    f"{tmp}/k{i}",
                    "-out",
                    f"{tmp}/c{i}",
                ],
                check=True,
                capture_output=True,
            )
            out.append(open(f"{tmp}/c{i}").read().strip())  # noqa: SIM115
    return out


def revoke_while_deleting(kube: KubeClient) -> float:
    """Delete the group ``revoked``, then take its token's opt-in label off (its owner
    revokes the token while the namespace stays). Returns the wall time of the revocation."""
    with contextlib.suppress(Exception):
        kube.delete("/apis/gitea.bpg.pw/v1alpha1/namespaces/evil-revoke/runnergroups/revoked")
    with contextlib.suppress(Exception):
        kube.patch(
            "/api/v1/namespaces/evil-revoke/secrets/tokens",
            {"metadata": {"labels": {"gitea.bpg.pw/credentials": None}}},
        )
    return time.time()
