"""The right to write, checked at each write (``--sharding``).

A replica may act on a group only while it holds the group's capacity domain. The check at
the start of a step is not enough: a step talks to Gitea and the API server for seconds, and
the right can lapse in between (the renew deadline passes, the domain is given away). So the
task that acts for one group sets its right here (:func:`fenced_by`), and the two write paths
every write goes through (kube/http.write for the API server, forge/http's transport for
Gitea) ask :func:`check` just before each request leaves. A context variable carries it, so
the write paths need no argument for it and tasks a step starts inherit it.

No right set (one replica, or the sharding loop's own Lease writes): every write may go.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import Context, ContextVar, copy_context

Right = Callable[[], bool]

_RIGHT: ContextVar[Right | None] = ContextVar("write_right", default=None)


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


@contextlib.contextmanager
def fenced_by(right: Right | None) -> Iterator[None]:
    """Writes within (and in tasks started within) go only while ``right()`` is true."""
    token = _RIGHT.set(right)
    try:
        yield
    finally:
        _RIGHT.reset(token)


def context(right: Right | None) -> Context:
    """A copy of the current context with ``right`` set: a task started in it (the
    ``context`` argument of ``asyncio.create_task``) writes only while ``right()`` is true."""
    ctx = copy_context()
    ctx.run(_RIGHT.set, right)
    return ctx
