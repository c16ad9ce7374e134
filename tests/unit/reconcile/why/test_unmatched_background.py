"""No pass waits for an unmatched-jobs evaluation: they run in the background, one per Gitea
at a time, within a CPU budget taken in turns by namespace (reconcile/why/unmatched_flight.py).

Before, each pass evaluated every Gitea with news after itself and awaited it in one shared
thread: a pass of tenant B's group waited for tenant A's slow Gitea, and in a burst of 151
groups on one Gitea the pass that found the evaluation due waited for it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from gitea_runner_operator.api.runnergroup import Scope
from gitea_runner_operator.reconcile.capacity.accounting import Answer, Claimant
from gitea_runner_operator.reconcile.capacity.ledger import Ledger
from gitea_runner_operator.reconcile.capacity.members import Member
from gitea_runner_operator.reconcile.why import unmatched_book
from gitea_runner_operator.reconcile.why.unmatched_book import UnmatchedBook, Verdict
from gitea_runner_operator.reconcile.why.unmatched_flight import Evaluations
from tests.support.builders import queued_job
from tests.support.family import World, answer, group_spec, reconciler

SLOW = "https://slow.tenant-a.example"
FAST = "https://gitea.tenant-b.example"


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, threading.Event]]:
    """Evaluations of SLOW block, in their thread, until the test lets them go."""
    entered, release = threading.Event(), threading.Event()
    real = unmatched_book.evaluation

    def slow(
        url: str, members: Sequence[Member], max_sets: int = 1000, peers: Sequence[Any] = ()
    ) -> Callable[[], Any]:
        work = real(url, members, max_sets, peers)

        def run() -> Any:
            if url == SLOW:
                entered.set()
                release.wait(30)
            return work()

        return run

    monkeypatch.setattr(unmatched_book, "evaluation", slow)
    try:
        yield entered, release
    finally:
        release.set()


async def _entered(entered: threading.Event) -> None:
    await asyncio.to_thread(entered.wait, 10)


async def test_a_pass_of_tenant_b_does_not_wait_for_tenant_a_s_slow_evaluation(held):
    entered, release = held
    world = World()
    world.add("team-a", "evil", group_spec("org", "evil", gitea={"url": SLOW}))
    world.add("team-b", "ci", group_spec("org", "acme", gitea={"url": FAST}))
    rec, sources, _ = reconciler(world)
    sources.get("team-a/evil").latest = answer((queued_job(1, "evil/app", ("typo-a",)),))
    sources.get("team-b/ci").latest = answer((queued_job(2, "acme/app", ("typo-b",)),))
    slow_pass = asyncio.create_task(rec.reconcile("team-a/evil"))
    await asyncio.wait_for(_entered(entered), 10)  # tenant A's evaluation is under way
    # Tenant B's pass ends while tenant A's evaluation still runs; before, it waited in
    # the one shared thread behind it (and tenant A's own pass waited for it too).
    await asyncio.wait_for(rec.reconcile("team-b/ci"), 5)
    await asyncio.wait_for(slow_pass, 5)
    assert not release.is_set()
    assert world.groups["team-b/ci"].status is not None  # its pass wrote its status
    release.set()
    await asyncio.wait_for(rec.unmatched.idle(), 10)
    # Both Gitea URLs were evaluated and published in the background, and each group
    # observing a label nobody offers was warned.
    for url in (SLOW, FAST):
        verdict = rec.unmatched.latest(url)
        assert verdict is not None and len(verdict.sets) == 1
    assert {(n, r) for n, _, r in world.events if r == "UnmatchedJobs"} == {
        ("evil", "UnmatchedJobs"),
        ("ci", "UnmatchedJobs"),
    }
    await rec.close()


async def test_a_burst_of_151_groups_on_one_gitea_passes_without_waiting_for_its_evaluation(
    held,
):
    """The platform case: one org group and 150 repo groups on one Gitea, 300 jobs queued
    at once. Every pass ends while the evaluation of that Gitea is under way (before, the
    pass that found it due waited for it), and the burst costs one evaluation under way and
    one after it, not one per pass."""
    entered, release = held
    world = World()
    by_repo = {r: tuple(queued_job(i, f"acme/app{r}") for i in (2 * r + 1, 2 * r + 2))
               for r in range(150)}  # fmt: skip
    jobs = tuple(j for pair in by_repo.values() for j in pair)
    world.add("platform", "org", group_spec("org", "acme", gitea={"url": SLOW}))
    for r in range(150):
        world.add(f"team-{r}", "ci", group_spec("repo", "acme", f"app{r}", gitea={"url": SLOW}))
    rec, sources, _ = reconciler(world)
    sources.get("platform/org").latest = answer(jobs)
    for r in range(150):
        sources.get(f"team-{r}/ci").latest = answer(by_repo[r])
    await asyncio.wait_for(rec.reconcile("platform/org"), 5)
    await asyncio.wait_for(_entered(entered), 10)
    for r in range(150):
        await asyncio.wait_for(rec.reconcile(f"team-{r}/ci"), 5)
    assert not release.is_set() and rec.unmatched.evaluated == 0
    release.set()
    await asyncio.wait_for(rec.unmatched.idle(), 10)
    assert rec.unmatched.evaluated <= 2
    assert sum(world.created(k) for k in world.groups) <= 300  # never more than queued
    await rec.close()


def _report(ledger: Ledger, book: UnmatchedBook, url: str, key: str, job: int = 1) -> None:
    c = Claimant(key, Scope.ORG, "acme", None, frozenset({"linux"}), not_busy=0, spare=0)
    before = ledger.members.get(key)
    ledger.report(url, c, Answer(key, float(job), (queued_job(job, labels=("typo",)),)))
    book.changed(before, ledger.members.get(key))


async def test_the_cpu_budget_is_taken_in_turns_by_namespace(monkeypatch):
    """Tenant A makes three Gitea URLs due, tenant B one: B's is evaluated second, not after
    all of A's. An evaluation that overdraws the CPU budget holds the next one back until it
    is repaid (here 2 s of CPU at half a core: 4 s)."""
    from gitea_runner_operator.reconcile.why import unmatched_flight

    ledger = Ledger()
    book = UnmatchedBook(ledger.members, min_interval=0)
    order: list[str] = []

    async def keep(verdict: Verdict) -> None:
        order.append(verdict.url)

    evaluations = Evaluations(book, ledger.members.of_url, keep, duty=1000.0, burst=0.0)
    for i in range(3):
        _report(ledger, book, f"https://a{i}.example", f"team-a/g{i}")
    _report(ledger, book, "https://b.example", "team-b/g")
    evaluations.poke()
    await asyncio.wait_for(evaluations.idle(), 10)
    assert order == ["https://a0.example", "https://b.example", "https://a1.example",
                     "https://a2.example"]  # fmt: skip

    def costly(work: Callable[[], Any]) -> Callable[[], Any]:
        return lambda: (work(), 2.0)  # what the thread's CPU clock would say

    monkeypatch.setattr(unmatched_flight, "_timed", costly)
    held = Evaluations(book, ledger.members.of_url, keep, duty=0.5, burst=0.0)
    order.clear()
    _report(ledger, book, "https://a0.example", "team-a/g0", job=2)
    _report(ledger, book, "https://b.example", "team-b/g", job=2)
    held.poke()
    await asyncio.sleep(0.3)
    assert order == ["https://a0.example"]  # the second waits for the budget
    await held.close()
    await evaluations.close()


async def test_the_background_evaluations_are_not_fenced_by_the_pass_that_poked_them():
    """Under --sharding each pass's writes are fenced by its group's domain: the background
    task must not inherit the fence of whichever pass started it, or every tenant's
    unmatched-jobs Events would stop when that one group moved to another replica."""
    from gitea_runner_operator.kit import fence

    ledger = Ledger()
    book = UnmatchedBook(ledger.members, min_interval=0)
    published: list[str] = []

    async def emit(verdict: Verdict) -> None:
        fence.check("POST events")  # what the Events' write does first
        published.append(verdict.url)

    evaluations = Evaluations(book, ledger.members.of_url, emit)
    _report(ledger, book, "https://b.example", "team-b/g")
    with fence.fenced_by(lambda: False):  # a pass of a group whose domain just moved
        evaluations.poke()
    await asyncio.wait_for(evaluations.idle(), 10)
    assert published == ["https://b.example"]
    await evaluations.close()
