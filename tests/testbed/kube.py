"""A tiny Kubernetes REST client over urllib (stdlib only).

Why: the testbed must not depend on kubectl or on the operator's own client
library, so fixtures and the kubelet harness talk to the API server directly
over HTTPS with a bearer token (or a client certificate for existing clusters).
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.testbed.jsonhttp import ApiError, request_json, wait_for

__all__ = ["KubeClient", "KubeError", "wait_for", "write_kubeconfig"]


class KubeError(ApiError):
    """An API server answered with an HTTP error."""


class KubeClient:
    """Minimal JSON client: ``get/post/put/patch/delete`` on API paths."""

    def __init__(
        self,
        server: str,
        token: str | None = None,
        ca_file: str | os.PathLike[str] | None = None,
        client_cert: tuple[str, str] | None = None,
        insecure: bool = False,
    ) -> None:
        self.server = server.rstrip("/")
        self.token = token
        ctx = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
        if insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if client_cert:
            ctx.load_cert_chain(client_cert[0], client_cert[1])
        self._ctx = ctx

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        query: dict[str, Any] | None = None,
        timeout: float = 30.0,
    ) -> Any:
        """Send one request; return the decoded JSON body (or None when empty)."""
        return request_json(
            method,
            self.server,
            path,
            error=KubeError,
            body=body,
            query=query,
            authorization=f"Bearer {self.token}" if self.token else None,
            content_type=content_type,
            context=self._ctx,
            timeout=timeout,
        )

    def get(self, path: str, **query: Any) -> Any:
        """GET a path; keyword arguments become the query string."""
        return self.request("GET", path, query=query or None)

    def text(self, path: str, timeout: float = 30.0) -> str:
        """GET a path that is not JSON (``/metrics``: the API server's own figures)."""
        req = urllib.request.Request(f"{self.server}{path}", method="GET")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, context=self._ctx, timeout=timeout) as resp:
            return str(resp.read().decode(errors="replace"))

    def watch(self, path: str, timeout: float = 330.0, **query: Any) -> Iterator[dict[str, Any]]:
        """A watch's events (``{"type": ..., "object": ...}``), each as it arrives, until the
        API server ends the stream (``timeoutSeconds`` in ``query``) or ``timeout`` passes
        without a byte. A benchmark that must know when an object appeared, to the
        millisecond, watches rather than lists every so often."""
        url = f"{self.server}{path}?" + urllib.parse.urlencode({**query, "watch": "true"})
        req = urllib.request.Request(url, method="GET")
        req.add_header("Accept", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, context=self._ctx, timeout=timeout) as resp:
            for line in resp:
                if line.strip():
                    yield json.loads(line)

    def post(self, path: str, body: Any) -> Any:
        """POST (create) an object."""
        return self.request("POST", path, body)

    def put(self, path: str, body: Any) -> Any:
        """PUT (replace) an object."""
        return self.request("PUT", path, body)

    def patch(self, path: str, body: Any, kind: str = "merge") -> Any:
        """PATCH with a merge (default), strategic ('strategic'), JSON ('json') patch, or a
        server-side apply ('apply': name the field manager in the path's query)."""
        ctype = {
            "merge": "application/merge-patch+json",
            "strategic": "application/strategic-merge-patch+json",
            "json": "application/json-patch+json",
            "apply": "application/apply-patch+yaml",
        }[kind]
        return self.request("PATCH", path, body, content_type=ctype)

    def delete(self, path: str, body: Any = None, missing_ok: bool = True) -> Any:
        """DELETE an object; a 404 is not an error unless ``missing_ok`` is False."""
        try:
            return self.request("DELETE", path, body)
        except KubeError as e:
            if e.status == 404 and missing_ok:
                return None
            raise

    def exists(self, path: str) -> bool:
        """True when GET path answers 200."""
        try:
            self.get(path)
            return True
        except KubeError as e:
            if e.status == 404:
                return False
            raise

    def with_token(self, token: str) -> KubeClient:
        """The same server and trust, as another identity (a ServiceAccount's token)."""
        other = copy.copy(self)
        other.token = token
        return other

    def headers(self, path: str) -> dict[str, str]:
        """The response headers of a GET (lower-cased names), whatever its status: API
        Priority and Fairness names there the flow schema and priority level that served
        the request, a refused one too."""
        req = urllib.request.Request(self.server + path, method="GET")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, context=self._ctx, timeout=30) as resp:
                return {k.lower(): v for k, v in resp.headers.items()}
        except urllib.error.HTTPError as exc:
            return {k.lower(): v for k, v in exc.headers.items()}

    def create_token(self, namespace: str, service_account: str, seconds: int = 3600) -> str:
        """A bearer token for a ServiceAccount through the TokenRequest API."""
        out = self.post(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": seconds},
            },
        )
        return str(out["status"]["token"])


def write_kubeconfig(
    path: Path,
    server: str,
    token: str,
    ca_file: str | os.PathLike[str] | None,
    namespace: str | None = None,
    name: str = "gro-testbed",
) -> Path:
    """Write a kubeconfig for a bearer token (JSON is valid YAML, so no YAML writer needed)."""
    cluster: dict[str, Any] = {"server": server}
    if ca_file:
        cluster["certificate-authority"] = str(ca_file)
    context: dict[str, Any] = {"cluster": name, "user": name}
    if namespace:
        context["namespace"] = namespace
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": context}],
        "current-context": name,
    }
    path.write_text(json.dumps(doc, indent=2))
    path.chmod(0o600)
    return path


def load_kubeconfig_client(kubeconfig: str | None = None) -> tuple[KubeClient, dict[str, Any]]:
    """Build a KubeClient for the current context of an existing kubeconfig.

    Why: ``GRO_TEST_CLUSTER=existing`` runs against a cluster someone else
    started. Kubeconfigs are YAML; without a YAML parser in the stdlib, this uses
    ``kubectl config view --raw --minify -o json`` when kubectl exists, else
    PyYAML when importable, else the file must be JSON. Token and client
    certificate users are supported; exec/auth-provider plugins are not.
    """
    path = (
        kubeconfig
        or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
        or str(Path.home() / ".kube/config")
    )
    doc: dict[str, Any]
    if shutil.which("kubectl"):
        out = subprocess.run(
            ["kubectl", "config", "view", "--raw", "--minify", "-o", "json", "--kubeconfig", path],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        doc = json.loads(out)
    else:
        text = Path(path).read_text()
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            import yaml  # optional, only for existing clusters

            doc = yaml.safe_load(text)
    ctx_name = doc.get("current-context")
    ctx = next(c["context"] for c in doc["contexts"] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == ctx["cluster"])
    user = next(u["user"] for u in doc["users"] if u["name"] == ctx["user"])
    tmp = Path(tempfile.mkdtemp(prefix="gro-kubeconfig-"))

    def materialise(data_key: str, file_key: str, src: dict[str, Any], name: str) -> str | None:
        if src.get(data_key):
            p = tmp / name
            p.write_bytes(base64.b64decode(src[data_key]))
            return str(p)
        return src.get(file_key)

    ca = materialise("certificate-authority-data", "certificate-authority", cluster, "ca.crt")
    cert = materialise("client-certificate-data", "client-certificate", user, "client.crt")
    key = materialise("client-key-data", "client-key", user, "client.key")
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = Path(user["tokenFile"]).read_text().strip()
    if not token and not cert:
        raise RuntimeError(
            f"kubeconfig {path}: only token or client-certificate users are supported"
        )
    client = KubeClient(
        cluster["server"],
        token=token,
        ca_file=ca,
        client_cert=(cert, key) if cert and key else None,
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
    )
    return client, {"kubeconfig": path, "server": cluster["server"], "ca_file": ca, "token": token}
