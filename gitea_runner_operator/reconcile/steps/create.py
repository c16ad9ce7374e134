"""The create step: render and create the runner Jobs a plan asks for, in doubling batches
(1, 2, 4, ...) like the Job controller's slow start, so a quota or admission refusal costs
one failed request, not hundreds. A group whose last creates all went through starts its
next pass at the largest batch that did (at most ``BATCH_START_MAX``): a busy group creates
a few dozen replacements a pass, and each batch is one round trip to the API server that
the pass (and the Pod events queued behind it) waits for. A refusal backs creation off
(doubling), starts the slow start again and is reported once; a Job whose create may have
happened stays expected, so it is never made twice; one the API server throttled (429,
kube/cluster.py) is not expected, and the pass is retried."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from gitea_runner_operator.api.naming import new_job_name
from gitea_runner_operator.api.runnergroup import RunnerGroupSpec
from gitea_runner_operator.kit.backoff import doubling
from gitea_runner_operator.kube.cluster import CreateRefused
from gitea_runner_operator.kube.http import Throttled
from gitea_runner_operator.metrics import Metrics
from gitea_runner_operator.objects.forgejo_job import render_forgejo_job
from gitea_runner_operator.objects.job_template import render_runner_job
from gitea_runner_operator.reconcile.expectations import Expectations
from gitea_runner_operator.reconcile.inputs import GroupPass
from gitea_runner_operator.reconcile.ports import ClusterWrites
from gitea_runner_operator.reconcile.scaling import Plan
from gitea_runner_operator.reconcile.state import GroupState

log = structlog.get_logger(__name__)

CREATE_BACKOFF_BASE = 5.0
CREATE_BACKOFF_MAX = 300.0
BATCH_START_MAX = 32


@dataclass(frozen=True, slots=True)
class Creator:
    """The create step, with what it writes through and counts with."""

    cluster: ClusterWrites
    expectations: Expectations
    metrics: Metrics
    job_ttl_seconds: int = 600
    clock: Callable[[], float] = time.monotonic
    # Group key -> the shard label of its domain (api/shard.py); None: the group's own.
    shard: Callable[[str], str | None] | None = None

    def reserve(self, p: GroupPass, count: int) -> tuple[str, ...]:
        """Choose the names of ``count`` runner Jobs and expect them, before they are sent
        (by the group's writer, reconcile/steps/runner_writes.py): from now on every pass
        counts them as being created, never creates for them again."""
        names = tuple(new_job_name(p.name, p.uid) for _ in range(count))
        for name in names:
            self.expectations.expect(p.key, name)
        return names

    async def create(
        self,
        p: GroupPass,
        decision: Plan,
        state: GroupState,
        on_forgejo: bool = False,
        reserved: Sequence[str] | None = None,
    ) -> int:
        """Create ``decision.create`` runner Jobs, or those ``reserved`` for them;
        returns how many the API server took. Reserved names never sent (a refusal stopped
        the batches) are no longer expected."""
        assert p.spec is not None
        key, group, spec = p.key, p.group, p.spec
        created: list[str] = []
        unsent = list(reserved) if reserved is not None else None
        remaining = decision.create if unsent is None else len(unsent)
        batch = max(1, state.create_batch)
        error: CreateRefused | None = None
        if remaining > 0:  # the wake-up path's spans (tests/benchmarks/webhook_latency.py)
            log.debug("creating runner jobs", group=key, count=remaining)
        while remaining > 0 and error is None:
            size = min(batch, remaining)
            if unsent is None:
                names = [new_job_name(p.name, p.uid) for _ in range(size)]
            else:
                names, unsent = unsent[:size], unsent[size:]
            for name in names:  # before the create: the watch may beat the response
                self.expectations.expect(key, name)
            results = await asyncio.gather(
                *(
                    self.cluster.create_job(self.render(group, spec, name, on_forgejo))
                    for name in names
                ),
                return_exceptions=True,
            )
            results = await self._again(group, spec, names, results, on_forgejo)
            unsure: BaseException | None = None
            for name, res in zip(names, results, strict=True):
                if isinstance(res, CreateRefused):
                    # A definite no from the API server: the Job does not exist.
                    self.expectations.lower(key, name)
                    error = res
                elif isinstance(res, Throttled):
                    # The API server is overloaded (429 to every attempt): no Job, and no
                    # fault of the group's. Not expected any more; the pass fails and is
                    # retried with back-off, which creates it then.
                    self.expectations.lower(key, name)
                    unsure = unsure or res
                elif isinstance(res, BaseException):
                    # No answer twice (a timeout, a lost connection): the Job may exist. It
                    # stays expected, so no pass creates another for it, and the next pass
                    # sends this name again (settle) rather than wait for it to lapse.
                    state.unsure_creates.add(name)
                    unsure = unsure or res
                else:
                    created.append(name)
            if unsure is not None:
                self._unreserve(key, unsent)
                state.create_batch = 1
                if created:
                    self.metrics.runners_created(p.namespace, p.name, len(created))
                raise unsure
            if error is None:
                state.create_batch = min(BATCH_START_MAX, max(state.create_batch, size))
            remaining -= size
            batch *= 2
        self._unreserve(key, unsent)
        logger = log.bind(group=key)
        self.metrics.runners_created(p.namespace, p.name, len(created))
        if created:
            logger.info(
                "created runner jobs",
                jobs=created,
                demand=decision.demand,
                alive=decision.alive,
                not_busy=decision.not_busy,
            )
            await self.cluster.emit_event(
                group,
                "Normal",
                "RunnersCreated",
                f"Created {len(created)} runner Job(s) for {decision.demand} queued job(s): "
                + ", ".join(created),
            )
        if error is not None:
            state.create_batch = 1
            first = state.create_error is None
            state.create_error = f"creating a runner Job was refused: {error}"
            state.create_failures += 1
            state.create_retry_at = self.clock() + doubling(
                CREATE_BACKOFF_BASE, CREATE_BACKOFF_MAX, state.create_failures
            )
            if first:
                logger.warning("runner job creation refused", error=str(error))
                await self.cluster.emit_event(group, "Warning", "JobCreateRefused", str(error))
        elif created:
            state.create_error, state.create_failures = None, 0
        return len(created)

    def _unreserve(self, key: str, unsent: Sequence[str] | None) -> None:
        for name in unsent or ():
            self.expectations.lower(key, name)

    async def _again(
        self,
        group: dict[str, Any],
        spec: RunnerGroupSpec,
        names: list[str],
        results: list[Any],
        on_forgejo: bool,
    ) -> list[Any]:
        """Send each create whose answer was lost once more, by the same name: the API
        server answers AlreadyExists (taken as created) if the first one made the Job, and
        creates it otherwise. Settled at once, instead of expected until it lapses."""
        lost = [
            i
            for i, res in enumerate(results)
            if isinstance(res, BaseException) and not isinstance(res, CreateRefused | Throttled)
        ]
        if not lost:
            return results
        again = await asyncio.gather(
            *(
                self.cluster.create_job(self.render(group, spec, names[i], on_forgejo))
                for i in lost
            ),
            return_exceptions=True,
        )
        out = list(results)
        for i, res in zip(lost, again, strict=True):
            # A refusal now may be admission's, of a Job the first send made: still unsure.
            out[i] = results[i] if isinstance(res, CreateRefused) else res
        return out

    async def settle(self, p: GroupPass, state: GroupState, on_forgejo: bool) -> GroupPass:
        """Send the creates the last passes got no answer to again, by name, before this
        pass plans: when the API server answers (created, or AlreadyExists), they are
        settled; a definite refusal stops expecting them; no answer keeps them expected."""
        assert p.spec is not None
        expected = self.expectations.names(p.key) - p.present
        state.unsure_creates &= expected
        names = sorted(state.unsure_creates)
        if not names:
            return p
        results = await asyncio.gather(
            *(self.cluster.create_job(self.render(p.group, p.spec, n, on_forgejo)) for n in names),
            return_exceptions=True,
        )
        sent = [
            n for n, res in zip(names, results, strict=True) if not isinstance(res, BaseException)
        ]
        refused = [
            n
            for n, res in zip(names, results, strict=True)
            if isinstance(res, CreateRefused | Throttled)
        ]
        for name in refused:
            self.expectations.lower(p.key, name)
        state.unsure_creates.difference_update(sent, refused)
        if sent:
            self.metrics.runners_created(p.namespace, p.name, len(sent))
            log.info("created runner jobs whose answer was lost", group=p.key, jobs=sent)
        return dataclasses.replace(p, pending=self.expectations.pending(p.key, p.present))

    def render(
        self, group: dict[str, Any], spec: RunnerGroupSpec, name: str, on_forgejo: bool = False
    ) -> dict[str, Any]:
        meta = group["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        return (render_forgejo_job if on_forgejo else render_runner_job)(
            group_name=meta["name"],
            namespace=meta["namespace"],
            group_uid=meta["uid"],
            spec=spec,
            job_name=name,
            ttl_seconds_after_finished=self.job_ttl_seconds,
            shard=self.shard(key) if self.shard is not None else None,
        )
