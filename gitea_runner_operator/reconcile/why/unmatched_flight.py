"""The unmatched-jobs evaluations, run in the background so that no reconcile waits for them.

A pass used to evaluate, after itself, every Gitea whose groups reported something new, and to
wait for it: a pass of one tenant's group then waited for the evaluation of another tenant's
Gitea (1.6-3.0 s behind 40 hostile Gitea URLs, against 2-8 ms), and a burst of 150 groups on
one Gitea found it due pass after pass. Now a pass only :meth:`~Evaluations.poke`\\ s; one
background task takes the due Gitea URLs one at a time (so one evaluation per URL: single
flight), in the book's thread (kit/offload.py), and publishes each result when it is done
(:meth:`~Evaluations.latest` keeps the last one per URL).

The thread's CPU is a budget: ``duty`` CPU-seconds per second, at most ``burst`` saved up
(kit/bucket.py, measured with the thread's own CPU clock); an evaluation that overdraws it
holds the next one back until the debt is repaid. The turns go round-robin by namespace (the
namespaces whose groups made a URL due): a tenant with forty expensive URLs takes one turn in
each round, like a tenant with one.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Awaitable, Callable, Sequence

import structlog

from gitea_runner_operator.kit.bucket import Bucket
from gitea_runner_operator.kit.offload import Offload
from gitea_runner_operator.reconcile.capacity.members import Member
from gitea_runner_operator.reconcile.why.unmatched_book import Found, UnmatchedBook, Verdict

log = structlog.get_logger(__name__)

# A quarter of one core, over time, for every tenant's unmatched-jobs evaluations together,
# and one second of it saved up: a real Gitea's evaluation costs milliseconds.
DUTY = 0.25
BURST = 1.0


class Evaluations:
    """``inputs(url)``: the groups whose offers and answers an evaluation of ``url`` weighs
    (the book of members, and whatever else a caller adds); ``publish``: what to do with a
    verdict (the metric, the Events), awaited in the background."""

    def __init__(
        self,
        book: UnmatchedBook,
        inputs: Callable[[str], Sequence[Member]],
        publish: Callable[[Verdict], Awaitable[None]],
        *,
        duty: float = DUTY,
        burst: float = BURST,
    ) -> None:
        self._book = book
        self._inputs = inputs
        self._publish = publish
        # Real time, whatever clock the book reads: the budget is of a real thread's CPU.
        self._cpu = Bucket(duty, burst, time.monotonic())
        self._thread: Offload[str, tuple[Found, float]] = Offload("why-unmatched")
        self._turns: dict[str, None] = {}  # namespaces in turn, the next one to be served first
        self._latest: dict[str, Verdict] = {}
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._again = False
        self.wake_in: float | None = None  # when the task comes back by itself (seconds)
        self.evaluated = 0  # evaluations run, for the benchmarks and tests

    def poke(self) -> None:
        """Something may have become due: the background task looks. Never waits."""
        self._again = True
        if self._task is None or self._task.done():
            # A context of its own: not the pass that poked first (its fence, under
            # --sharding, is that group's domain, not this work's).
            self._task = asyncio.get_running_loop().create_task(
                self._drain(), name="why-unmatched", context=contextvars.Context()
            )

    def latest(self, url: str) -> Verdict | None:
        """The last verdict published for ``url`` with unmatched jobs (None: none); what a
        pass may read, never wait for."""
        return self._latest.get(url)

    async def idle(self) -> None:
        """Wait until no evaluation is due now or under way (tests, benchmarks)."""
        while self._task is not None and not self._task.done():
            await asyncio.wait([self._task])

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _drain(self) -> None:
        while True:
            self._again = False
            picked = self._next()
            if picked is None:
                if self._again:
                    continue
                self._wake_later()
                return
            await self._within_budget()
            work = self._book.start(picked, self._inputs(picked), force=True)
            if work is None:
                continue
            try:
                found, cpu = await self._thread.run(picked, _timed(work))
            except Exception as exc:  # a bug: this URL's evaluation is lost, not the task
                log.warning("unmatched jobs evaluation failed", gitea=picked, error=repr(exc))
                continue
            self._cpu.refill(time.monotonic())
            self._cpu.tokens -= cpu
            self.evaluated += 1
            verdict = self._book.finish(picked, found)
            if verdict.sets:
                self._latest[picked] = verdict
            else:  # nothing unmatched (or no group left on that Gitea): nothing to keep
                self._latest.pop(picked, None)
            try:
                await self._publish(verdict)
            except Exception as exc:  # an Event or a metric lost; the next evaluation retries
                log.warning("unmatched jobs not published", gitea=picked, error=repr(exc))

    def _next(self) -> str | None:
        """The URL to evaluate now: the next namespace in turn that made one due, its first
        such URL. A namespace served goes to the back of the turns."""
        ready: dict[str, str] = {}
        for url, _ in self._book.due():
            if self._book.ready_in(url) == 0:
                for namespace in self._book.asked_by(url):
                    ready.setdefault(namespace, url)
        if not ready:
            return None
        for namespace in ready:
            self._turns.setdefault(namespace)
        for namespace in list(self._turns):
            del self._turns[namespace]
            if namespace in ready:
                self._turns[namespace] = None  # to the back
                return ready[namespace]
            # A namespace with nothing due leaves the turns; it comes back when it has.
        return None

    async def _within_budget(self) -> None:
        """Wait until the CPU spent by earlier evaluations is repaid."""
        level = self._cpu.refill(time.monotonic())
        if level < 0:
            await asyncio.sleep(-level / self._cpu.rate)

    def _wake_later(self) -> None:
        """Come back when an evaluation held back for ``min_interval`` becomes due."""
        waits = [w for url, _ in self._book.due() if (w := self._book.ready_in(url))]
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.wake_in = min(waits) if waits else None
        if self.wake_in is not None:
            self._timer = asyncio.get_running_loop().call_later(self.wake_in, self.poke)


def _timed(work: Callable[[], Found]) -> Callable[[], tuple[Found, float]]:
    """``work``, with the CPU seconds it cost its thread."""

    def run() -> tuple[Found, float]:
        started = time.thread_time()
        found = work()
        return found, time.thread_time() - started

    return run
