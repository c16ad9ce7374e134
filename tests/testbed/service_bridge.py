"""The in-cluster ``kubernetes`` Service, answered on the real node.

A Pod that talks to the API server the in-cluster way uses ``KUBERNETES_SERVICE_HOST`` and
``_PORT``, which the kubelet sets from the ``default/kubernetes`` Service: its ClusterIP
(``10.96.0.1`` in the testbed's ``--service-cluster-ip-range``), port 443. A real cluster's
kube-proxy turns that virtual IP into the API server's address. The testbed runs no
kube-proxy (and its API server listens on loopback only, with no Endpoints), so a Pod's
packets to the ClusterIP would go nowhere.

The bridge: the ClusterIP is added as a local /32 address of the real node's bridge
(``gro-br0``; it goes with the bridge when the node stops), and socat listens on it and
forwards each connection to the API server's loopback port. A Pod's packets reach the host
through the route to the service range that the node's CNI configuration gives every Pod
(via the bridge's gateway; Pods have no default route) and land on that local address. TLS passes
through untouched: the API server's self-signed serving certificate already names the
ClusterIP and ``kubernetes.default.svc`` (checked by :func:`serving_names`), and the Pod's
``ca.crt`` is the ``kube-root-ca.crt`` the controller-manager publishes from that same
certificate, so the operator verifies the server as it would anywhere else.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlparse

from .kube import KubeClient, wait_for
from .realnode import BRIDGE, _die_with_parent


@dataclass
class ServiceBridge:
    ip: str
    port: int
    target: str


def kubernetes_service(kube: KubeClient) -> tuple[str, int]:
    """The ClusterIP and port of ``default/kubernetes`` (what Pods are told to use)."""
    svc = kube.get("/api/v1/namespaces/default/services/kubernetes")
    port = next(p["port"] for p in svc["spec"]["ports"] if p.get("name") == "https")
    return str(svc["spec"]["clusterIP"]), int(port)


def serving_names(host: str, port: int) -> set[str]:
    """The DNS names and IP addresses the API server's serving certificate covers."""
    pem = ssl.get_server_certificate((host, port))
    out = subprocess.run(
        ["openssl", "x509", "-noout", "-ext", "subjectAltName"],
        input=pem, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    entries = out.splitlines()[-1].split(",")
    return {e.strip().split(":", 1)[1] for e in entries if ":" in e}


@contextlib.contextmanager
def bridged_kubernetes_service(kube: KubeClient, apiserver_url: str) -> Iterator[ServiceBridge]:
    """Answer the ``kubernetes`` Service's ClusterIP on the real node (see the module
    docstring) for as long as the context lasts."""
    ip, port = kubernetes_service(kube)
    parsed = urlparse(apiserver_url)
    assert parsed.hostname and parsed.port
    names = serving_names(parsed.hostname, parsed.port)
    missing = {ip, "kubernetes.default.svc"} - names
    if missing:
        raise RuntimeError(f"the API server's certificate does not name {missing}: {names}")
    subprocess.run(["ip", "addr", "add", f"{ip}/32", "dev", BRIDGE], check=True)
    target = f"{parsed.hostname}:{parsed.port}"
    proc = subprocess.Popen(
        ["socat", f"TCP-LISTEN:{port},bind={ip},fork,reuseaddr", f"TCP:{target}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )

    def listening() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"socat on {ip}:{port} exited ({proc.returncode})")
        with socket.socket() as s:
            s.settimeout(1)
            return s.connect_ex((ip, port)) == 0

    try:
        wait_for(listening, timeout=10, interval=0.1, what=f"bridge {ip}:{port}")
        yield ServiceBridge(ip, port, target)
    finally:
        proc.kill()
        proc.wait(timeout=5)
        subprocess.run(["ip", "addr", "del", f"{ip}/32", "dev", BRIDGE], check=False)
