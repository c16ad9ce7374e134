"""This replica's share of the groups (``--sharding``), and the one answer to "who serves
group X, and where".

The workers ask whether to reconcile a group, the poll task's fence whether it may still
write, the status writer where the group is served (``status.domain``), the webhook which
replica a delivery's groups are served by. All ask this object, which holds the rounds
over the membership Leases (sharding/leases/round.py), the layout of domains the cache's
groups make, and the groups taken since the domains they belong to were taken.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from gitea_runner_operator.api.placement import Placement
from gitea_runner_operator.api.shard import shard_label
from gitea_runner_operator.api.template_policy import TemplatePolicy
from gitea_runner_operator.kube.cache import spec_changed
from gitea_runner_operator.metrics import ShardingMetrics
from gitea_runner_operator.reconcile.capacity.accounting import Claimant
from gitea_runner_operator.reconcile.steps.admission import Admissions
from gitea_runner_operator.settings import Settings
from gitea_runner_operator.sharding.forwards import Split, split
from gitea_runner_operator.sharding.leases.keeper import MemberKeeper
from gitea_runner_operator.sharding.leases.membership import MembershipLeases
from gitea_runner_operator.sharding.leases.round import SETTLE_READS, Sharding
from gitea_runner_operator.sharding.shapes import ShapeMemo, offers, shapes_of, widening_changed
from gitea_runner_operator.sharding.tenure import Layout


class Groups(Protocol):
    """The informer cache, as the share reads it: the groups (for the layout), and the
    Jobs and Pods it keeps only for the groups served here."""

    def group_keys(self) -> list[str]: ...

    def group(self, key: str) -> dict[str, Any] | None: ...

    async def serve(self, keys: Iterable[str], shards: Iterable[str] = ()) -> None: ...

    def unserve(self, keys: Iterable[str]) -> None: ...

    def narrow(self, shards: Iterable[str]) -> None: ...


class Workers(Protocol):
    """What acts on the groups this replica serves (the controller's work queue and
    workers): told of the groups taken, and of those released, which it answers once their
    work here is done."""

    def take(self, keys: frozenset[str]) -> None: ...

    async def release(self, keys: frozenset[str]) -> None: ...


class Share:
    """The cache's share of Jobs and Pods follows what is taken and released."""

    def __init__(
        self,
        membership: MembershipLeases,
        groups: Groups,
        workers: Workers,
        settings: Settings,
        keeper: MemberKeeper | None = None,
        metrics: ShardingMetrics | None = None,
        admissions: Admissions | None = None,
    ) -> None:
        self._membership, self._groups, self._workers = membership, groups, workers
        # The reconciler's memo of parsed specs by uid and generation (the controller passes
        # the one its reconciler uses): a layout change costs the changed groups' parse.
        self._shapes = ShapeMemo(
            admissions
            if admissions is not None
            else Admissions(
                TemplatePolicy.parse(settings.template_policy, settings.template_service_accounts),
                settings.own_namespace,
                settings.global_scope_namespaces,
            )
        )
        self._keeper = keeper
        self._layout: Layout | None = None
        self._offers: dict[str, list[Claimant]] = {}  # by Gitea URL, made with the layout
        self._served: dict[str, str] = {}  # group key -> the held domain it belongs to
        self.round = Sharding(
            membership,
            self.layout,
            keeper=keeper,
            take=self._take,
            release=self._release,
            metrics=metrics,
            prepare=self._prepare,
            unprepare=self._unprepare,
            settled=self.after_round,
            retry_period=settings.retry_period,
            renew_deadline=settings.renew_deadline,
            settle_reads=SETTLE_READS,
            read_ahead=max(0.0, settings.lease_duration - settings.renew_deadline),
        )

    # -- who serves group X, and where --------------------------------------------------------

    def serves(self, key: str) -> bool:
        """Whether this replica may act for ``key`` now: a worker's pass, and each write of
        it (kit/fence.py asks per write)."""
        return self.round.acts_on(key)

    def left(self, key: str) -> float:
        """Seconds this replica may still act for ``key`` at most: a write must have left
        by then (kit/fence.bounded)."""
        return self.round.left(key)

    def placement(self, key: str) -> Placement | None:
        """Where a group this replica serves is served (status.domain)."""
        domain = self._served.get(key)
        if domain is None:
            return None
        held = self.round.tenure.held.get(domain, frozenset())
        return self.layout().placement(domain, held, self.round.tenure.me)

    def split(self, keys: Sequence[str]) -> Split:
        """Which of ``keys`` (a webhook delivery's groups) to wake here, and which another
        replica serves (sharding/forwards.py)."""
        if all(self.serves(key) for key in keys):
            return Split(tuple(keys))
        return split(
            keys,
            serves=self.serves,
            domain_of=self.layout().domain_of(),
            me=self.round.tenure.me,
            peers=self._membership.addresses,
        )

    # -- the layout, and taking and releasing -------------------------------------------------

    def layout(self) -> Layout:
        """The domains of the groups in the cache, recomputed after a group changed shape;
        each spec is parsed once per generation (sharding/shapes.py)."""
        if self._layout is None:
            keys = self._groups.group_keys()
            pairs = ((k, self._groups.group(k)) for k in keys)
            shapes, odd = shapes_of(pairs, self._shapes, served=self._served.__contains__)
            self._layout = Layout.of(shapes, odd)
            self._offers = offers(shapes)
        return self._layout

    def offers(self, url: str) -> list[Claimant]:
        """What every group of the Gitea at ``url`` offers (scope and labels), served here
        or by a peer: the unmatched-jobs evaluation must not call a job unmatched that a
        peer's group runs (reconcile/why/unmatched_book.py)."""
        self.layout()
        return self._offers.get(url, [])

    def group_event(
        self, key: str, kind: str, obj: dict[str, Any], before: dict[str, Any] | None
    ) -> None:
        """A RunnerGroup event: the layout is recomputed when the group's spec changed, or
        a global group's polls began or stopped working (its status's Ready). A group gone
        leaves the memo (a group served here leaves the reconciler's memory too)."""
        if spec_changed(kind, obj, before) or widening_changed(obj, before):
            self._layout = None
        if kind == "DELETED":
            self._shapes.forget(key)

    def spec_changed(self) -> None:
        self._layout = None

    def _take(self, keys: frozenset[str]) -> None:
        for domain, members in self.round.tenure.held.items():
            self._served.update(dict.fromkeys(members & keys, domain))
        self._workers.take(keys)

    def _shards(self) -> set[str]:
        """The shard buckets of the domains held or read ahead (sharding/leases/ahead.py):
        what the Job and Pod watches select."""
        return {shard_label(d) for d in (*self.round.tenure.held, *self.round.ahead.domains)}

    async def _prepare(self, keys: frozenset[str]) -> None:
        """Before the groups taken open: their Jobs and Pods whole in the cache, with the
        watches selecting every bucket held (kube/narrowed.py)."""
        await self._groups.serve(keys, self._shards())

    def _unprepare(self, keys: frozenset[str]) -> None:
        """Groups read ahead that this replica will not take after all: their Jobs and Pods
        leave its memory (their buckets leave the watches after the round)."""
        self._groups.unserve(keys)

    def after_round(self) -> None:
        """After each round: buckets no longer held leave the watches' selector."""
        self._groups.narrow(self._shards())

    async def _release(self, keys: frozenset[str]) -> None:
        await self._workers.release(keys)
        for key in keys:
            self._served.pop(key, None)
        self._groups.unserve(keys)  # their Jobs and Pods leave this replica's memory

    # -- running ------------------------------------------------------------------------------

    def start(self) -> None:
        if self._keeper is not None:
            self._keeper.start()

    async def run(self, stop: asyncio.Event) -> None:
        await self.round.run(stop)

    async def close(self) -> None:
        """After the round released the Lease: the thread that renewed it ends."""
        if self._keeper is not None:
            await self._keeper.close()
