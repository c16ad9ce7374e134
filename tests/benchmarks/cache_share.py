"""What one replica's informers keep of the runner Jobs and Pods with ``--sharding``, by
tracemalloc, at 1 to 3 replicas:

    python -m tests.benchmarks.cache_share [--groups 1000] [--per-group 2]

Every group has ``--per-group`` running runner Jobs and Pods (shaped as cache_footprint.py
shapes them); each event goes through a sharded ClusterCache's informers as the watch hands
it over, for a replica serving every N-th group. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tracemalloc

from kubernetes_asyncio import client

from gitea_runner_operator.api import constants
from gitea_runner_operator.kube.cache import ClusterCache
from tests.benchmarks.cache_footprint import runner_job, runner_pod


def events(groups: int, per_group: int) -> list[tuple[str, str]]:
    """(kind, raw JSON) of every group's runner Jobs and Pods."""
    out = []
    for g in range(groups):
        for i in range(per_group):
            for kind, make in (("job", runner_job), ("pod", runner_pod)):
                obj = make(g * per_group + i)
                obj["metadata"]["labels"][constants.GROUP_NAME_LABEL] = f"g{g:04d}"
                out.append((kind, json.dumps(obj)))
    return out


async def kept(raws: list[tuple[str, str]], groups: int, replicas: int | None) -> int:
    async with client.ApiClient() as api:
        cache = ClusterCache(api, ["team-001"], shared=replicas is not None)
        if cache.share is not None:  # this replica serves every N-th group (no fetch)
            cache.share.served = {f"team-001/g{g:04d}" for g in range(0, groups, replicas or 1)}
        tracemalloc.start()
        for kind, raw in raws:
            informer = cache.jobs[0] if kind == "job" else cache.pods[0]
            informer._apply("ADDED", json.loads(raw))
        size, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--per-group", type=int, default=2)
    args = parser.parse_args(argv)
    raws = events(args.groups, args.per_group)
    print(f"{args.groups} groups, {args.per_group} runner Jobs and Pods each ({len(raws)} objects)")
    for label, replicas in (("unsharded", None), ("1 of 1", 1), ("1 of 2", 2), ("1 of 3", 3)):
        size = asyncio.run(kept(raws, args.groups, replicas))
        print(f"  {label:10} informers keep {size / 2**20:6.2f} MiB", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
