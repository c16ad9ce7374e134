"""The cache server the operator deploys, for real: the session's runner binary (the testbed's
runner, whose cache server is act's cache handler behind the bearer secret and per-repository
isolation of the official one, or ``GRO_TESTBED_RUNNER_BIN``) run as
``gitea-runner cache-server`` with exactly the arguments and config file the operator renders
(only paths and the port are local), spoken to as the runner and ``actions/cache`` speak to
it. It pins what the README promises about isolation: only the holder of the group's secret
can register job tokens; a job's token reads and writes only its own repository's entries,
and stops working when the runner revokes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gitea_runner_operator.api.cache import server_config
from gitea_runner_operator.api.runnergroup import parse_spec
from gitea_runner_operator.objects.jobcache_server import CONFIG_DIR, DATA_DIR, render_deployment
from tests.support.builders import VALID
from tests.support.launcher import free_port
from tests.testbed import runners

pytestmark = pytest.mark.integration

SECRET = "a-group-secret-of-64-hex-chars-in-production"


def call(
    method: str, url: str, token: str | None = None, body: Any = None, headers: Any = None
) -> tuple[int, bytes]:
    data = body if isinstance(body, bytes) else None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    if body is not None and not isinstance(body, bytes):
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def answers(url: str) -> bool:
    try:
        return call("GET", url)[0] == 401
    except urllib.error.URLError:  # not listening yet
        return False


@pytest.fixture
def server(tmp_path: Path) -> Any:
    runner_binary = runners.resolve()  # built first when needed
    spec = parse_spec({**VALID, "cache": {"enabled": True}})
    deployment = render_deployment(group_name="ci", namespace="team-a", group_uid="u", spec=spec)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (tmp_path / "config.yaml").write_text(server_config(SECRET))
    port = free_port()
    local = {
        f"{CONFIG_DIR}/config.yaml": str(tmp_path / "config.yaml"),
        f"{DATA_DIR}/cache": str(tmp_path / "data"),
        "8088": str(port),
        "ci-cache.team-a.svc": "127.0.0.1",
    }
    args = [local.get(a, a) for a in container["args"]]
    # the container's own command (a shell that finds gitea-runner on PATH)
    path = f"{runner_binary.path.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    proc = subprocess.Popen(
        [*container["command"], *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PATH": path},
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while not answers(f"{base}/_apis/artifactcache/cache"):
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
        assert time.monotonic() < deadline, "cache server did not answer"
        time.sleep(0.2)
    yield base
    # the kubelet's SIGTERM stops it (the command turns it into SIGINT: v1.0.8 ignores SIGTERM)
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail("the cache server ignored SIGTERM")
    output = proc.stdout.read() if proc.stdout else b""
    assert SECRET.encode() not in output
    assert b"cache server is listening" in output


def save(base: str, token: str, key: str, payload: bytes) -> int:
    """What actions/cache does to save: reserve, upload a chunk, commit."""
    api = f"{base}/_apis/artifactcache"
    status, body = call("POST", f"{api}/caches", token, {"key": key, "version": "v1"})
    assert status == 200, body
    cache_id = int(json.loads(body)["cacheId"])
    range_header = {"Content-Range": f"bytes 0-{len(payload) - 1}/*"}
    status, body = call("PATCH", f"{api}/caches/{cache_id}", token, payload, range_header)
    assert status == 200, body
    status, body = call("POST", f"{api}/caches/{cache_id}", token, {"size": len(payload)})
    assert status == 200, body
    return cache_id


def test_the_rendered_cache_server_isolates_repositories_and_needs_the_group_secret(server):
    register = f"{server}/_internal/register"
    assert call("POST", register, "not-the-secret", {"token": "t-a", "repo": "acme/a"})[0] == 401
    # What each runner does at job start with cache.external_secret.
    assert call("POST", register, SECRET, {"token": "t-a", "repo": "acme/a"})[0] == 200
    assert call("POST", register, SECRET, {"token": "t-b", "repo": "acme/b"})[0] == 200

    cache_id = save(server, "t-a", "deps-linux", b"node_modules.tar")
    find = f"{server}/_apis/artifactcache/cache?keys=deps-linux&version=v1"
    status, body = call("GET", find, "t-a")
    assert status == 200, body
    hit = json.loads(body)
    # the download URL names the host the operator gave (its Service, in a cluster)
    assert hit["archiveLocation"].startswith(f"{server}/_apis/artifactcache/artifacts/")
    assert call("GET", hit["archiveLocation"]) == (200, b"node_modules.tar")

    # another repository of the same group: no hit, and it cannot write into the entry
    assert call("GET", find, "t-b")[0] == 204
    patch = f"{server}/_apis/artifactcache/caches/{cache_id}"
    assert call("PATCH", patch, "t-b", b"x", {"Content-Range": "bytes 0-0/*"})[0] == 403
    # a token nobody registered, and a token after its job ended, read nothing
    assert call("GET", find, "t-unknown")[0] == 401
    assert call("POST", f"{server}/_internal/revoke", SECRET, {"token": "t-a"})[0] == 200
    assert call("GET", find, "t-a")[0] == 401
