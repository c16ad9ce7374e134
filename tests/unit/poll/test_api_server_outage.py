"""An API server that does not answer the poll's Secret read: the group backs off as it does
for a failing Gitea, instead of re-reading every few seconds. (Measured: 200 groups with
Gitea and the API server gone cost 0.135 cores re-reading every 3 s, against 0.040 with
both up; tests/benchmarks/dead_peers.py.)"""

from __future__ import annotations

import aiohttp
import pytest

from gitea_runner_operator.api.observation import Problem, ProblemKind, Snapshot
from gitea_runner_operator.api.runnergroup import parse_spec
from gitea_runner_operator.forge.client import SessionPool
from gitea_runner_operator.poll.observer import Observer
from gitea_runner_operator.poll.pacing import next_delay
from tests.support.gitea_answers import ORG_SPEC


class DownSecrets:
    def __init__(self) -> None:
        self.reads = 0

    async def read(self, namespace: str, name: str, key: str, field: str, url: str) -> str:
        self.reads += 1
        raise aiohttp.ClientConnectionError("Cannot connect to host 10.96.0.1:443")

    def invalidate(self, namespace: str, name: str) -> None:
        pass


async def test_a_secret_read_the_api_server_failed_is_a_failing_peer_not_a_users_fault():
    pool = SessionPool()
    try:
        observer = Observer(DownSecrets(), pool)  # type: ignore[arg-type]
        snapshot, handle = await observer.observe("ns", parse_spec(ORG_SPEC))
    finally:
        await pool.close()
    assert handle is None and snapshot.problem is not None
    assert snapshot.problem.reason == "SecretReadFailed"
    assert snapshot.problem.kind is ProblemKind.CLUSTER and snapshot.problem.kind.backs_off
    assert "ns/" in snapshot.problem.message  # names the Secret, never a value


@pytest.mark.parametrize("failures", [1, 2, 3, 10])
def test_it_is_retried_like_a_failing_gitea_not_on_the_secret_interval(failures: int):
    """Fixing a Secret takes seconds, so a missing one is retried every 3 s; an API server
    that is down is nobody's setting to fix, and a thousand groups every 3 s would load it
    as it comes back."""
    cluster = next_delay(15, failures, None, ProblemKind.CLUSTER, backoff_max=30)
    assert cluster == next_delay(15, failures, None, ProblemKind.GITEA, backoff_max=30)
    assert cluster >= 15 > next_delay(15, failures, None, ProblemKind.SECRET, backoff_max=30)


def test_only_failing_peers_back_off():
    assert {k for k in ProblemKind if k.backs_off} == {ProblemKind.GITEA, ProblemKind.CLUSTER}
    assert Snapshot(0.0, "x", problem=Problem("GiteaUnreachable", "m")).problem.kind.backs_off
