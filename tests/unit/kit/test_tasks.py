"""Stopping background tasks: a stop is bounded whatever the tasks do."""

from __future__ import annotations

import asyncio
import time

from gitea_runner_operator.kit.tasks import finish_or_cancel


async def test_tasks_that_finish_within_the_grace_are_not_cancelled() -> None:
    quick = asyncio.ensure_future(asyncio.sleep(0.01, result="done"))
    await finish_or_cancel([quick], grace=1)
    assert quick.result() == "done"


async def test_a_task_that_never_ends_is_cancelled_after_the_grace() -> None:
    hung = asyncio.ensure_future(asyncio.Event().wait())
    started = time.monotonic()
    await finish_or_cancel([hung], grace=0.05)
    assert hung.cancelled() and time.monotonic() - started < 1


async def test_a_task_that_swallows_its_cancellation_cannot_hold_the_stop() -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue

    task = asyncio.ensure_future(stubborn())
    started = time.monotonic()
    await finish_or_cancel([task], grace=0.05)
    assert time.monotonic() - started < 1  # two graces, not forever
    assert not task.done()
    release.set()  # tidy: the test's loop must not keep it
    await task


async def test_a_failed_task_is_not_raised_by_the_stop() -> None:
    async def fails() -> None:
        raise RuntimeError("write failed")

    task = asyncio.ensure_future(fails())
    await finish_or_cancel([task], grace=1)
    assert isinstance(task.exception(), RuntimeError)
