"""A poll task's own faults, as opposed to its Gitea's (failed answers, paced by
poll/pacing.py): the task ends, hangs, or raises what nobody foresaw (a bug, or a Gitea
answer no parser expected).

None may go unnoticed, and none may cost more than its own group's task. A task that ended
on its own or hangs is seen as such (:class:`WatchedTask`), and its group's next pass
restarts it (``Pollers.ensure``): nothing else would notice, and the group would keep its
last answer without ever asking Gitea again. An unexpected failure costs its own observation
or step only, and is logged with its traceback the first time only, per group, step and
exception type; after that at most one line per ``FAILURE_LOG_EVERY`` with the count held
back (kit/lograte.py). A tenant whose Gitea answers something odd on every poll must not fill
the log every team shares.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from contextvars import Context
from typing import Any

import structlog

from gitea_runner_operator.kit import fence
from gitea_runner_operator.kit.lograte import LogRate
from gitea_runner_operator.kit.tasks import how_ended
from gitea_runner_operator.poll.steps import GiteaStep, Turn

log = structlog.get_logger(__name__)

# How late past its own bound a step may end before the task counts as hung (the
# observer's housekeeping, the scheduler under load).
BEAT_SLACK = 30.0
FAILURE_LOG_EVERY = 60.0


class WatchedTask:
    """One group's poll task, which says before each await by when it must next be seen to
    move (each step's own bound, or the end of its sleep, plus ``BEAT_SLACK``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self._due = float("inf")

    def start(
        self, loop: Coroutine[Any, Any, None], *, name: str, within: float, context: Context
    ) -> None:
        """Run ``loop``, which must first be seen to move ``within`` seconds from now."""
        self.expect_within(within)
        self._task = asyncio.create_task(loop, name=name, context=context)

    def expect_within(self, seconds: float) -> None:
        self._due = self._clock() + seconds + BEAT_SLACK

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def hung(self) -> bool:
        return self._clock() > self._due

    @property
    def ended(self) -> str:
        return how_ended(self._task)

    async def stop(self) -> None:
        """Cancel the task and wait for it, without raising what it may have ended with."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None


def failure_log() -> LogRate:
    """The rate of unexpected-failure lines: one table for every group's poller, so a group
    restarted by a spec change does not write its first traceback again."""
    return LogRate(FAILURE_LOG_EVERY)


def log_failure(failures: LogRate, key: str, what: str, exc: BaseException) -> None:
    """One line for an unexpected failure of group ``key``'s task, within its rate (see the
    module's doc): the first of its kind with the traceback, the later ones with the error
    and the count."""
    if isinstance(exc, fence.Fenced):  # the right lapsed mid-step: expected, not a fault
        log.info("write refused: the group's domain is no longer held", group=key)
        return
    cause = (key, what, type(exc).__name__)
    first = cause not in failures
    held = failures.admit(cause)
    if held is None:
        return
    if first:
        log.error(what, group=key, exc_info=exc)
    else:
        log.error(what, group=key, error=repr(exc), held_back=held)


async def run_step(
    step: GiteaStep, turn: Turn, deadline: float, failed: Callable[[str, BaseException], None]
) -> bool:
    """Run one Gitea step under ``deadline``, a failure or a timeout costing that step only
    (a line through ``failed``): whether the reconcile must hear of what changed."""
    tell = False
    try:
        async with asyncio.timeout(deadline):
            tell = await step.run(turn)
    except TimeoutError as exc:
        tell = step.timed_out(turn, deadline)
        failed(f"{step.what} did not finish within {deadline:.0f}s", exc)
    except Exception as exc:
        failed(f"{step.what} failed unexpectedly", exc)
    return tell
