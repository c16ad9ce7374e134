"""Stopping background tasks, one rule for every owner of them (the status writers, the
Events recorder, the controller's housekeeping): what is under way may finish for a short
grace, then is cancelled, and the stop waits for the cancellation only as long again. An API
server that never answers, or a task that swallows its cancellation, cannot hold a stopping
operator (or a lost leadership handed to the next replica) for longer than twice the grace.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

STOP_GRACE = 5.0


def cancelled_itself() -> bool:
    """Whether the running task was asked to stop (``Task.cancel``), rather than an awaited
    future it does not own having been cancelled: only the first must end the task."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def how_ended(task: asyncio.Task[Any] | None) -> str:
    """How a background task ended, for the line that restarts it."""
    if task is None:
        return "never started"
    if not task.done():
        return "running"
    if task.cancelled():
        return "cancelled"
    exc = task.exception()
    return repr(exc) if exc is not None else "returned"


async def finish_or_cancel(tasks: Iterable[asyncio.Future[Any]], grace: float = STOP_GRACE) -> None:
    """Wait up to ``grace`` seconds for ``tasks``; cancel those still running and wait up to
    ``grace`` again for them to end. Their results and errors are not looked at: each owner
    reports its own failures where they happen."""
    pending = [t for t in tasks if not t.done()]
    if not pending:
        return
    _, late = await asyncio.wait(pending, timeout=grace)
    for task in late:
        task.cancel()
    if late:
        await asyncio.wait(late, timeout=grace)
    for task in pending:  # retrieved, so asyncio never logs "exception was never retrieved"
        if task.done() and not task.cancelled():
            task.exception()
