"""The round harness of the sharding tests: replicas on one in-memory Lease API
(tests/support/leases.py), each with its Sharding over a fixed set of groups."""

from __future__ import annotations

from typing import Any

from gitea_runner_operator.metrics import Metrics
from gitea_runner_operator.sharding.leases.membership import MembershipLeases
from gitea_runner_operator.sharding.leases.round import Sharding, layout_of
from tests.support.builders import spec_with
from tests.support.leases import Clock, FakeLeases


def group(org: str, repo: str | None = None) -> dict[str, Any]:
    if repo is None:
        return {"spec": spec_with(scope="org", org=org, repo=None)}
    return {"spec": spec_with(org=org, repo=repo)}


GROUPS: dict[str, dict[str, Any]] = {
    **{f"ns/app{i}": group(f"org{i}", "app") for i in range(12)},
    "ns/org3": group("org3"),  # joins ns/app3: one domain of two
    "ns/broken": {"spec": {"scope": "nowhere"}},
}


class Link:
    """One replica's way to the shared Lease API, which can be cut (a partition)."""

    def __init__(self, api: FakeLeases) -> None:
        self.api = api
        self.down = False

    def __getattr__(self, name: str) -> Any:
        if self.down:
            raise OSError("partitioned")
        return getattr(self.api, name)


class Replica:
    def __init__(
        self, api: FakeLeases, clock: Clock, name: str, metrics: Metrics | None = None
    ) -> None:
        self.taken: list[frozenset[str]] = []
        self.released: list[frozenset[str]] = []
        self.link = Link(api)
        self.leases = MembershipLeases(None, "ops", "gro", name, clock=clock, leases=self.link)  # type: ignore[arg-type]
        self.sharding = Sharding(
            self.leases,
            lambda: layout_of(GROUPS.items()),
            take=self.taken.append,
            release=self._release,
            metrics=metrics.sharding if metrics is not None else None,
            clock=clock,
        )

    async def _release(self, keys: frozenset[str]) -> None:
        self.released.append(keys)

    def serves(self) -> set[str]:
        return {k for k in GROUPS if self.sharding.acts_on(k)}


def exclusive(replicas: list[Replica]) -> None:
    seen: set[str] = set()
    for r in replicas:
        mine = r.serves()
        assert not mine & seen
        seen |= mine


async def rounds(replicas: list[Replica], n: int) -> None:
    for _ in range(n):
        for r in replicas:
            await r.sharding.round()
            exclusive(replicas)
