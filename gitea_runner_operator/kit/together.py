"""Independent awaits, sent together: a pass that awaits N writes one after another holds its
group for N answers of the API server, where one would do (issue 45: 0.3 to 3 s an answer
while the API server handles a burst). Every one of them is carried to its end, and the first
failure is raised after, so a failure never leaves the others half-awaited.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any


async def all_of(*awaitables: Awaitable[Any]) -> None:
    """Await every one of ``awaitables`` at once; then raise the first that failed."""
    for outcome in await asyncio.gather(*awaitables, return_exceptions=True):
        if isinstance(outcome, BaseException):
            raise outcome
