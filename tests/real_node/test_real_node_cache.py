"""spec.cache for real: the operator's cache server Pod (the session runner's
``cache-server``, from the locally built runner image) and its runner Pods on the testbed's
real node, with real workflows in a real Gitea.

Two jobs of one repository run on two different ephemeral runners of group A: the first
saves an entry through the cache API exactly as ``actions/cache`` does (reserve, upload,
commit, with ``$ACTIONS_CACHE_URL`` and ``$ACTIONS_RUNTIME_TOKEN``), the second restores it
and prints how long the restore took. A job of group B, in the same repository, finds
nothing in its own cache and is refused by group A's server.

The runner image has no curl, so the steps speak HTTP with bash's ``/dev/tcp``.

One testbed gap, and how it is bridged: the real node has no cluster DNS and no kube-proxy,
so a Service name does not resolve there. The test maps each group's Service name to its
cache Pod's IP with ``hostAliases`` in the groups' templates (the Service forwards to that
Pod's port in a real cluster). The cache uses ``persistent: false`` (an emptyDir): the node
has no storage provisioner (the PVC path is covered by tests/integration/test_cache.py).
"""

from __future__ import annotations

import re
import textwrap

import pytest

from gitea_runner_operator.api.cache import service_host
from tests.support.real_node import HTTP, LOCAL, cache_pod_ip, on_real_node
from tests.support.testbed import allow_cache
from tests.testbed import images

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.real_node]


WORKFLOW = """\
name: cache
on: [push]
defaults:
  run:
    shell: bash
jobs:
  save:
    runs-on: gro-cache-a
    steps:
      - run: |
          set -eu
          CACHE=$ACTIONS_CACHE_URL
          echo "cache: $CACHE"
          {http}
          payload="warm-$GITHUB_RUN_ID"
          req POST /_apis/artifactcache/caches '{{"key":"deps-linux","version":"v1"}}'
          echo "reserve: $code $body"; test "$code" = 200
          id=$(printf '%s' "$body" | grep -o '"cacheId":[0-9]*' | cut -d: -f2)
          req PATCH /_apis/artifactcache/caches/$id "$payload" \\
            "Content-Range: bytes 0-$(( ${{#payload}} - 1 ))/*"$'\\r\\n'
          echo "upload: $code"; test "$code" = 200
          # The commit goes without actions/cache's {{"size":N}} body: the server takes the
          # size from the upload and never reads a commit's body, and Go's server closes a
          # "Connection: close" request with its body unread, which resets the connection
          # and could discard the answer before cat read it (seen once in CI).
          req POST /_apis/artifactcache/caches/$id
          echo "commit: $code"; test "$code" = 200
  restore:
    needs: save
    runs-on: gro-cache-a
    steps:
      - run: |
          set -eu
          CACHE=$ACTIONS_CACHE_URL
          {http}
          start=$(date +%s%N)
          req GET "/_apis/artifactcache/cache?keys=deps-linux&version=v1"
          echo "lookup: $code"; test "$code" = 200
          loc=$(printf '%s' "$body" | grep -o '"archiveLocation":"[^"]*"' | cut -d'"' -f4)
          loc=${{loc//\\\\u0026/"&"}}
          req GET "/${{loc#http://*/}}"
          end=$(date +%s%N)
          echo "download: $code"; test "$code" = 200
          test "$body" = "warm-$GITHUB_RUN_ID"
          echo "RESTORED $body in $(( (end - start) / 1000000 )) ms"
  other-group:
    needs: save
    runs-on: gro-cache-b
    steps:
      - run: |
          set -eu
          CACHE=$ACTIONS_CACHE_URL
          {http}
          req GET "/_apis/artifactcache/cache?keys=deps-linux&version=v1"
          echo "own cache: $code"; test "$code" = 204
          CACHE={a_url}
          {http}
          req GET "/_apis/artifactcache/cache?keys=deps-linux&version=v1"
          echo "group A's cache: $code $body"; test "$code" = 401
"""


def workflow(a_url: str) -> str:
    """The workflow with the HTTP helper inlined, indented into each step's script."""
    return WORKFLOW.format(http=textwrap.indent(HTTP.strip(), " " * 10).lstrip(), a_url=a_url)


def test_a_cached_entry_is_restored_by_the_next_runner_and_not_by_another_group(real):
    allow_cache(real.kube, real.ns)
    image = LOCAL + images.RUNNER
    cache = {"enabled": True, "persistent": False, "size": "256Mi"}
    for group in ("a", "b"):
        real.group(
            group,
            mode="host",
            labels=[f"gro-cache-{group}"],
            image=image,
            maxActiveRunners=1,
            template=on_real_node(),
            cache=cache,
        )
    ips = {g: cache_pod_ip(real, g) for g in ("a", "b")}
    aliases = [{"ip": ips[g], "hostnames": [service_host(g, real.ns)]} for g in ("a", "b")]
    for group in ("a", "b"):
        real.group(
            group,
            mode="host",
            labels=[f"gro-cache-{group}"],
            image=image,
            maxActiveRunners=1,
            template=on_real_node(hostAliases=aliases),
            cache=cache,
        )

        real.wait_cache_settled(group)

    a_url = f"http://{service_host('a', real.ns)}:8088/"
    real.push("cache.yml", workflow(a_url))
    names = {"save", "restore", "other-group"}
    done = real.wait_done(names, timeout=420)
    logs = {n: real.job_log(n) for n in names}
    if done != dict.fromkeys(names, "success"):  # the whole story, untruncated
        report = "\n".join(f"--- job {n}: {done.get(n)}\n{text}" for n, text in logs.items())
        raise AssertionError(f"{report}\nhostAliases: {aliases}\n{real.pods_report()}")
    jobs = real.jobs()
    assert jobs["save"]["runner_name"] != jobs["restore"]["runner_name"]
    # the step's output line, not the echoed script
    (restored,) = re.findall(r"RESTORED warm-\d+ in (\d+) ms", logs["restore"])
    print(f"\nsecond job's restore (lookup + download via the cache server): {restored} ms")
    assert "group A's cache: 401" in logs["other-group"]
    secret = real.kube.get(f"/api/v1/namespaces/{real.ns}/secrets/a-cache")["data"]
    assert all(secret["external-secret"] not in log for log in logs.values())
