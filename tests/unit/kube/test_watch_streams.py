"""The watch connection pool is sized by ``watches.streams``: every informer holds one watch
stream for as long as it runs, so a stream the pool has no room for waits for a connection
without end and its objects never arrive (a replica under --sharding with three namespaces
kept five streams each in a pool sized for three)."""

from __future__ import annotations

from unittest.mock import MagicMock

import pytest

from gitea_runner_operator.kube import watches


@pytest.mark.parametrize("sharded", [False, True])
@pytest.mark.parametrize("namespaces", [[], ["a"], ["a", "b", "c"], [f"t{i}" for i in range(40)]])
def test_the_pool_has_a_connection_for_every_stream(namespaces: list[str], sharded: bool) -> None:
    apis = watches.Apis(MagicMock(), MagicMock(), MagicMock())
    made = watches.informers(apis, namespaces or None, admit=None, sharded=sharded)
    opened = sum(len(informers) for informers in made.values())
    assert opened == watches.streams(len(namespaces), sharded=sharded)
