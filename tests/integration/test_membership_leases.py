"""Membership Leases (``--sharding``) on the real API server, with the operator's own
ServiceAccount: members see one another, a released member is gone on the next read, a
member that stops renewing lapses after its duration, and the fencing rule of
sharding/tenure.py never lets two members act on one domain while they join, leave and
lose the API server, with every domain served again once the lapse bound has passed.

Timings are client-go's defaults scaled down five times (15/10/2 s -> 3/2/0.4 s), so that a
lapse takes seconds, not minutes; the rule only needs deadline < duration."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from gitea_runner_operator.sharding.leases.membership import MembershipLeases
from gitea_runner_operator.sharding.leases.round import Sharding
from gitea_runner_operator.sharding.tenure import Layout, Reading
from tests.support.launcher import OPERATOR_NS, OPERATOR_SA
from tests.support.testbed import MEMBERSHIP_ROLE, allow_leases, unique
from tests.testbed.kube import KubeClient

pytestmark = pytest.mark.integration

DURATION = 3  # seconds: the Lease's duration
DEADLINE = 2.0  # a member that has not renewed for this long acts on nothing
PERIOD = 0.4  # renew, read and plan this often
# Enough that every member of each stage below wins a bucket (owners bid per shard bucket,
# api/shard.py): with 12, pod-b won none while three members ran.
DOMAINS = 16
LAYOUT = Layout("fp", {f"d{i}": frozenset({f"team/g{i}"}) for i in range(DOMAINS)})
KEYS = sorted(k for keys in LAYOUT.domains.values() for k in keys)


@pytest.fixture
def membership_rbac(kube: KubeClient) -> Iterator[None]:
    """``list`` and ``delete`` on Leases, which membership needs beyond the leader's verbs
    (manifests/rbac.yaml grants get, create and update only)."""
    allow_leases(kube, OPERATOR_NS, ["list", "delete"])
    yield
    base = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{OPERATOR_NS}"
    kube.delete(f"{base}/rolebindings/{MEMBERSHIP_ROLE}")
    kube.delete(f"{base}/roles/{MEMBERSHIP_ROLE}")


@pytest.fixture
async def api(
    cluster: Any, membership_rbac: None, tmp_path: Path
) -> AsyncIterator[client.ApiClient]:
    """An API client with the operator's ServiceAccount token (never the admin's)."""
    token = cluster.kube.create_token(OPERATOR_NS, OPERATOR_SA)
    kubeconfig = cluster.kubeconfig_for_token(token, tmp_path / "kubeconfig")
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    async with client.ApiClient(cfg) as opened:
        yield opened


def member(api: client.ApiClient, ring: str, name: str) -> MembershipLeases:
    return MembershipLeases(api, OPERATOR_NS, ring, name, lease_duration=DURATION)


async def fresh(leases: MembershipLeases) -> set[str]:
    reading = await leases.read(0)
    assert reading is not None, "the membership Leases could not be listed"
    return set(reading.fresh)


async def test_members_see_each_other_and_leave_by_release_or_lapse(api: client.ApiClient) -> None:
    ring = unique("ring")
    a, b, c = (member(api, ring, n) for n in ("pod-a", "pod-b", "pod-c"))
    for m in (a, b, c):
        assert await m.renew(None)
    # pod-c's last renewal: no reader can see it earlier, so none may count it lapsed sooner
    # than DURATION after this (each counts from its own first sight of the renewal).
    renewed = time.monotonic()
    assert await fresh(a) == {"pod-b", "pod-c"}
    assert await fresh(b) == {"pod-a", "pod-c"}

    await b.release()  # deleted: gone on the very next read, no wait for a lapse
    assert await fresh(a) == {"pod-c"}
    assert await fresh(c) == {"pod-a"}

    # pod-c renews no more: the others count it alive for its duration on their own clock.
    lapsed_at = None
    while time.monotonic() - renewed < DURATION + 3:
        assert await a.renew(None)
        seen = await fresh(a)
        if "pod-c" not in seen:
            lapsed_at = time.monotonic() - renewed
            break
        await asyncio.sleep(0.2)
    assert lapsed_at is not None, "a member that stopped renewing never lapsed"
    assert DURATION <= lapsed_at < DURATION + 1.5, lapsed_at
    # A lapsed member that renews again is back at once.
    assert await c.renew(None)
    assert await fresh(a) == {"pod-c"}
    await a.release()
    await c.release()


class Partitionable:
    """A member's Leases that can lose the API server, as a partitioned or frozen replica
    does: every call fails, and it must stop acting by itself before the others take over."""

    def __init__(self, leases: MembershipLeases) -> None:
        self.leases = leases
        self.identity = leases.identity
        self.cut = False

    async def renew(self, published: Any) -> bool:
        return False if self.cut else await self.leases.renew(published)

    async def read(self, publication: int) -> Reading | None:
        return None if self.cut else await self.leases.read(publication)

    async def release(self) -> None:
        if not self.cut:
            await self.leases.release()

    def evicted(self) -> bool:
        return self.leases.evicted()


class Ring:
    """Members running Sharding loops on the real Leases, checked at every gain and sampled
    every 10 ms: no group is ever acted on by two members at one instant."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.name = unique("ring")
        self.members: dict[str, tuple[Sharding, Partitionable]] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.stops: dict[str, asyncio.Event] = {}
        self.overlaps: list[str] = []
        self.samples = 0
        self.gains: list[tuple[float, str, frozenset[str]]] = []

    def acting(self) -> dict[str, set[str]]:
        return {
            name: {k for k in KEYS if sharding.acts_on(k)}
            for name, (sharding, _) in self.members.items()
        }

    def check(self) -> None:
        self.samples += 1
        owners: dict[str, str] = {}
        for name, keys in self.acting().items():
            for key in keys:
                if key in owners:
                    self.overlaps.append(f"{key}: {owners[key]} and {name}")
                owners[key] = name

    def join(self, name: str) -> None:
        leases = Partitionable(member(self.api, self.name, name))

        def take(keys: frozenset[str]) -> None:
            self.gains.append((time.monotonic(), name, keys))
            self.check()

        async def release(keys: frozenset[str]) -> None:
            await asyncio.sleep(0.05)  # finishing the reconciles under way takes a moment

        sharding = Sharding(
            leases,  # type: ignore[arg-type]
            lambda: LAYOUT,
            take=take,
            release=release,
            retry_period=PERIOD,
            renew_deadline=DEADLINE,
        )
        self.members[name] = (sharding, leases)
        self.stops[name] = asyncio.Event()
        self.tasks[name] = asyncio.create_task(sharding.run(self.stops[name]))

    async def leave(self, name: str) -> None:
        self.stops[name].set()
        await self.tasks.pop(name)
        del self.members[name]

    def covered(self) -> bool:
        held = set().union(*self.acting().values()) if self.members else set()
        return held == set(KEYS)

    async def until_covered(self, limit: float) -> float:
        start = time.monotonic()
        while not self.covered():
            assert time.monotonic() - start < limit, f"not every domain served: {self.acting()}"
            await asyncio.sleep(0.05)
        return time.monotonic() - start

    async def sample(self) -> None:
        while True:
            self.check()
            await asyncio.sleep(0.01)


async def test_fencing_keeps_two_members_off_one_domain_on_real_leases(
    api: client.ApiClient,
) -> None:
    ring = Ring(api)
    sampler = asyncio.create_task(ring.sample())
    # A lapse is seen DURATION after the last change, then one round to publish and one to
    # take: the longest a domain may go unserved after its member vanished.
    bound = DURATION + 3 * PERIOD + 2
    try:
        ring.join("pod-a")
        await ring.until_covered(10)
        assert ring.acting()["pod-a"] == set(KEYS)

        ring.join("pod-b")
        ring.join("pod-c")
        joined = await _until_spread(ring, {"pod-a", "pod-b", "pod-c"}, limit=10)

        await ring.leave("pod-b")  # graceful: releases its domains and deletes its Lease
        left = time.monotonic()
        await _until_spread(ring, {"pod-a", "pod-c"}, limit=5)
        graceful = time.monotonic() - left

        _, cut = ring.members["pod-c"]
        cut.cut = True  # partitioned: cannot renew, read or release
        gone = time.monotonic()
        await _until_spread(ring, {"pod-a"}, limit=bound)
        lapse = time.monotonic() - gone
        assert lapse >= DEADLINE, "pod-a took pod-c's domains before pod-c could step down"

        ring.join("pod-d")  # a newcomer after all that
        await _until_spread(ring, {"pod-a", "pod-d"}, limit=10)
    finally:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
        for name in list(ring.members):
            _, leases = ring.members[name]
            leases.cut = False
            await ring.leave(name)
    assert ring.overlaps == [], ring.overlaps[:5]
    assert ring.samples > 100
    print(
        f"\nmembership on real Leases: spread over 3 in {joined:.2f} s, graceful leave "
        f"{graceful:.2f} s, partitioned member replaced in {lapse:.2f} s "
        f"(bound {bound:.1f} s), {ring.samples} samples, no overlap"
    )


async def _until_spread(ring: Ring, members: set[str], limit: float) -> float:
    """Wait until every domain is served and only by ``members``, each serving some."""
    start = time.monotonic()
    while True:
        acting = ring.acting()
        serving = {name for name, keys in acting.items() if keys}
        if ring.covered() and serving == members:
            return time.monotonic() - start
        assert time.monotonic() - start < limit, f"not spread over {members}: {acting}"
        await asyncio.sleep(0.05)
