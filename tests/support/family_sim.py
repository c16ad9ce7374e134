"""The in-memory model of Gitea and a cluster that the family property tests run the real
Reconciler and Ledger against (unit/reconcile/test_family_property.py, and the hand-over's
in test_family_takeover.py): jobs arriving, polls, reconciles, runners registering, taking
the oldest job they can run, finishing, webhook wake-ups; ``matched`` is the size of a
maximum matching of the not-busy runners to the queued jobs they can run."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

from gitea_runner_operator.api.gitea import ActionJob, ActionRunner
from gitea_runner_operator.api.observation import Observation, Snapshot
from gitea_runner_operator.reconcile.capacity.ledger import Ledger
from gitea_runner_operator.reconcile.expectations import Expectations
from tests.support.family import CREATED, LABEL, URL, Clock, World, group_spec, reconciler

REPOS = ("acme/app", "acme/lib")


@dataclass(frozen=True)
class Member:
    namespace: str
    name: str
    scope: str
    repo: str | None = None  # repo scope: "acme/app"
    reads: tuple[str, ...] = REPOS  # what its token may list (org scope)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def covers(self, repo: str) -> bool:
        return self.scope == "org" or self.repo == repo


FAMILIES = {
    "org+repo": (Member("a", "org", "org"), Member("b", "app", "repo", "acme/app")),
    "two-orgs": (Member("a", "one", "org"), Member("b", "two", "org")),
    "restricted": (
        Member("a", "org", "org", reads=("acme/lib",)),
        Member("b", "app", "repo", "acme/app"),
    ),
}


@dataclass
class Runner:
    group: str
    job: str  # the runner Job
    registered: bool = False
    busy: bool = False
    done: bool = False

    @property
    def pod(self) -> str:
        return self.job + "-bcdfg"


@dataclass
class Gitea:
    queued: dict[int, str] = field(default_factory=dict)  # job id -> repo
    next_id: int = 1


class _Queue:
    """The work queue the group writers give groups back to; the schedule reconciles anyway."""

    def add(self, key: str) -> None:
        pass

    def add_rate_limited(self, key: str) -> None:
        pass


class Sim:
    """``later``: the runner creates are sent by the group writers after the passes, as the
    controller runs them (reconcile/steps/runner_writes.py), when the schedule yields (at
    random), so jobs arrive, polls answer and runners take jobs between a pass's decision and
    its creates; a runner counts from its pass's decision on, and registers once its Job
    exists."""

    def __init__(
        self, members: tuple[Member, ...], rng: random.Random, later: bool = False
    ) -> None:
        self.members = {m.key: m for m in members}
        self.rng = rng
        self.world = World()
        for m in members:
            owner_repo = (m.repo or "acme/x").split("/")
            spec = group_spec(m.scope, "acme", owner_repo[1] if m.scope == "repo" else None)
            spec["maxActiveRunners"] = 4
            self.world.add(m.namespace, m.name, spec)
        self.clock = Clock(1000.0)
        self.ledger = Ledger(min_interval=0.5, clock=self.clock)
        self.later = later
        self.expectations = Expectations(clock=self.clock)
        self.rec, self.sources, _ = reconciler(
            self.world,
            ledger=self.ledger,
            clock=self.clock,
            expectations=self.expectations,
            **({"queue": _Queue()} if later else {}),
        )
        self.gitea = Gitea()
        self.runners: dict[str, Runner] = {}

    # -- the world's moves --------------------------------------------------------------------

    def arrive(self) -> None:
        self.gitea.queued[self.gitea.next_id] = self.rng.choice(REPOS)
        self.gitea.next_id += 1

    def poll(self, key: str) -> None:
        m = self.members[key]
        self.clock.now += 0.1
        jobs = tuple(
            ActionJob(
                id=i,
                labels=(LABEL,),
                status="queued",
                url=f"{URL}/api/v1/repos/{repo}/actions/jobs/{i}",
            )
            for i, repo in sorted(self.gitea.queued.items())
            if m.covers(repo) and repo in m.reads
        )
        runners = tuple(
            ActionRunner(id=n, name=r.pod, busy=r.busy, ephemeral=True, status="idle")
            for n, r in enumerate(self.runners.values(), start=1)
            if r.registered and not r.done
        )
        self.sources.get(key).latest = Snapshot(
            started_at=self.clock.now,
            checked_at=CREATED,
            observation=Observation(queued=jobs, runners=runners),
        )

    def register(self) -> None:
        waiting = [
            r
            for r in self.runners.values()
            if not r.registered and not r.done and r.job in self.world.groups[r.group].jobs
        ]
        if waiting:
            runner = self.rng.choice(waiting)
            runner.registered = True
            group = self.world.groups[runner.group]
            group.pods.append(
                {
                    "metadata": {
                        "name": runner.pod,
                        "labels": {"batch.kubernetes.io/job-name": runner.job},
                        "creationTimestamp": CREATED,
                    },
                    "status": {"phase": "Running"},
                }
            )

    def take(self) -> None:
        """A registered runner, at random, takes the oldest job it can run, as Gitea hands
        them. The take must not strand another runner: the maximum matching of not-busy
        runners to jobs falls by the one pair taken, never by two (a runner of a wider scope
        that took the job a narrower group's runner was made for, leaving that one nothing
        it can run)."""
        idle = [r for r in self.runners.values() if r.registered and not r.busy and not r.done]
        self.rng.shuffle(idle)
        for runner in idle:
            m = self.members[runner.group]
            fits = [i for i, repo in sorted(self.gitea.queued.items()) if m.covers(repo)]
            if fits:
                before = self.matched()
                del self.gitea.queued[fits[0]]
                runner.busy = True
                assert self.matched() >= before - 1, (
                    f"{runner.group}'s runner took job {fits[0]}, the one another group's "
                    f"runner was made for: that runner has no job left to take; "
                    f"queued={self.gitea.queued}"
                )
                return

    def quick(self) -> None:
        """A runner takes a job and finishes it before any group polls again: a job only a
        peer's older answer may list (a restricted token's org runner taking a job of the
        repository only the repo group's token reads)."""
        self.take()
        busy = [r for r in self.runners.values() if r.busy and not r.done]
        if busy:
            runner = busy[-1] if self.rng.random() < 0.5 else self.rng.choice(busy)
            runner.done = True
            self.world.finish(runner.group, runner.job, self.clock.now)

    def finish(self) -> None:
        busy = [r for r in self.runners.values() if r.busy and not r.done]
        if busy:
            runner = self.rng.choice(busy)
            runner.done = True
            self.world.finish(runner.group, runner.job, self.clock.now)

    async def reconcile(self, key: str) -> None:
        before = self.matched()
        known = set(self.world.groups[key].jobs) | set(self.runners)
        await self.rec.reconcile(key)
        # Created, or reserved by the pass and on their way (``later``).
        made = [*self.world.groups[key].jobs, *sorted(self.expectations.names(key))]
        new = [n for n in dict.fromkeys(made) if n not in known]
        for name in new:
            self.runners[name] = Runner(key, name)
        after = self.matched()
        assert after - before == len(new), (
            f"{key} created {len(new)} runner(s), covering {after - before} more job(s): "
            f"queued={self.gitea.queued}"
        )

    # -- the measure --------------------------------------------------------------------------

    def matched(self) -> int:
        """Size of a maximum matching of not-busy runners to queued jobs they can run."""
        free = [r for r in self.runners.values() if not r.busy and not r.done]
        jobs = sorted(self.gitea.queued)
        owner: dict[int, int] = {}

        def augment(i: int, seen: set[int]) -> bool:
            m = self.members[free[i].group]
            for j in jobs:
                if j in seen or not m.covers(self.gitea.queued[j]):
                    continue
                seen.add(j)
                if j not in owner or augment(owner[j], seen):
                    owner[j] = i
                    return True
            return False

        return sum(1 for i in range(len(free)) if augment(i, set()))

    async def run(self, steps: int) -> None:
        keys = sorted(self.members)
        for _ in range(steps):
            if self.later and self.rng.random() < 0.3:
                await asyncio.sleep(0)  # the API server answers the writers' creates
            move = self.rng.random()
            key = self.rng.choice(keys)
            self.clock.now += self.rng.choice((0.0, 0.1, 0.6))
            if move < 0.2:
                self.arrive()
            elif move < 0.4:
                self.poll(key)
            elif move < 0.65:
                await self.reconcile(key)
            elif move < 0.75:
                self.register()
            elif move < 0.85:
                self.take()
            elif move < 0.9:
                self.finish()
            elif move < 0.95:
                self.quick()
            else:  # a webhook wake-up: a poll, and the reconcile it enqueues
                self.poll(key)
                await self.reconcile(key)
        if self.later:
            await self.rec.close()  # the writes under way, and the evaluations
