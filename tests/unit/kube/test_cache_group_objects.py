"""The groups' objects, read by the webhook receiver's thread while the controller's loop
changes them (kube/cache.ClusterCache.group_objects, runtime/receiver_thread.py)."""

from __future__ import annotations

import sys
import threading

from kubernetes_asyncio import client

from gitea_runner_operator.kube.cache import ClusterCache


def group(i: int) -> dict[str, object]:
    return {"metadata": {"namespace": "team-a", "name": f"g{i}", "generation": 1}, "spec": {}}


async def test_the_groups_objects_are_read_whole_while_another_thread_changes_them() -> None:
    async with client.ApiClient() as api:
        cache = ClusterCache(api, ["team-a"])
        [informer] = cache.groups
        informer.cache.update({f"team-a/g{i}": group(i) for i in range(200)})
        assert sorted(o["metadata"]["name"] for o in cache.group_objects()) == sorted(
            f"g{i}" for i in range(200)
        )
        failures: list[BaseException] = []
        stop = threading.Event()

        def read() -> None:
            while not stop.is_set():
                try:
                    objects = cache.group_objects()
                    assert all(isinstance(o, dict) and "metadata" in o for o in objects)
                except BaseException as exc:  # a dict changed while read: what must not be
                    failures.append(exc)
                    return

        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # the threads change hands as often as they can
        reader = threading.Thread(target=read)
        reader.start()
        try:
            for n in range(20_000):  # the informer's events: groups come and go
                informer.cache[f"team-a/new-{n % 50}"] = group(1000 + n)
                informer.cache.pop(f"team-a/new-{(n + 25) % 50}", None)
        finally:
            stop.set()
            reader.join()
            sys.setswitchinterval(interval)
        assert not failures, failures[0]
