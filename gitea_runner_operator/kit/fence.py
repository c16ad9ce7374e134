"""The right to write, checked at each write (``--sharding``).

A replica may act on a group only while it holds the group's capacity domain. The check at
the start of a step is not enough: a step talks to Gitea and the API server for seconds, and
the right can lapse in between (the renew deadline passes, the domain is given away). So the
task that acts for one group sets its right here (:func:`fenced_by`), and the two write paths
every write goes through (kube/http.write for the API server, forge/http's transport for
Gitea) ask :func:`check` just before each request leaves. A context variable carries it, so
the write paths need no argument for it and tasks a step starts inherit it.

No right set (one replica, or the sharding loop's own Lease writes): every write may go.

A check just before a request is handed to the HTTP client is not enough either: the client
may wait for a pooled connection, or to connect, for seconds, and the request then leaves
after the right lapsed (a DELETE handed over 1 s before the lapse reached Gitea 3.4 s after
it). So a right also says how long it has left (``left``), and :func:`bounded` cuts the
whole write, connection wait included, when that runs out: what has not left by then never
leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from contextvars import Context, ContextVar, copy_context

Right = Callable[[], bool]
Left = Callable[[], float]  # seconds until the right lapses at the latest

_RIGHT: ContextVar[Right | None] = ContextVar("write_right", default=None)
_LEFT: ContextVar[Left | None] = ContextVar("write_right_left", default=None)


class Fenced(Exception):
    """A write refused: the replica no longer holds the domain of the group it wrote for."""


def check(what: str) -> None:
    """Raise :class:`Fenced` if the current task's right has lapsed; ``what`` names the
    write in the exception (a method and a path, never a body)."""
    right = _RIGHT.get()
    if right is not None and not right():
        raise Fenced(f"{what}: the domain of this group is no longer held")


def holds() -> bool:
    """Whether the current task may write now (True without a right set)."""
    right = _RIGHT.get()
    return right is None or right()


def left() -> float | None:
    """Seconds the current task's right has left at most (None: no bound)."""
    until = _LEFT.get()
    return None if until is None else until()


@contextlib.asynccontextmanager
async def bounded(what: str) -> AsyncIterator[None]:
    """Check the right, then run the write while the right lasts: when the time it had left
    runs out it is asked again (a renewal meanwhile extends it), and a write still waiting
    (for a connection, a slow peer) once it has none left is cut and raises
    :class:`Fenced`."""
    check(what)
    budget = left()
    if budget is None:
        yield
        return
    if budget <= 0:
        raise Fenced(f"{what}: the right to write for this group has run out")
    loop = asyncio.get_running_loop()
    deadline = asyncio.timeout(None)

    def look_again() -> None:
        more = left()
        if more is not None and more > 0:
            timer[0] = loop.call_later(more, look_again)
        else:
            deadline.reschedule(loop.time())  # cut now

    timer = [loop.call_later(budget, look_again)]
    try:
        async with deadline:
            yield
    except TimeoutError:
        if deadline.expired():
            raise Fenced(f"{what}: cut when the right to write for this group ran out") from None
        raise
    finally:
        timer[0].cancel()


@contextlib.contextmanager
def fenced_by(right: Right | None, until: Left | None = None) -> Iterator[None]:
    """Writes within (and in tasks started within) go only while ``right()`` is true, and
    each within ``until()`` seconds (:func:`bounded`)."""
    token, bound = _RIGHT.set(right), _LEFT.set(until)
    try:
        yield
    finally:
        _LEFT.reset(bound)
        _RIGHT.reset(token)


def context(right: Right | None, until: Left | None = None) -> Context:
    """A copy of the current context with ``right`` (and ``until``) set: a task started in
    it (the ``context`` argument of ``asyncio.create_task``) writes only while ``right()`` is
    true, each write within ``until()`` seconds."""
    ctx = copy_context()
    ctx.run(_RIGHT.set, right)
    ctx.run(_LEFT.set, until)
    return ctx
