"""The one back-off rule: the delay doubles with each attempt, up to a cap; and the one
jitter rule that spreads delays drawn at the same moment.

Written once so that the work queue, the poll task and the reconcile's create and stuck
back-offs cannot drift apart (and none overflows: ``2.0 ** 1024`` raises).
"""

from __future__ import annotations

import random
from collections.abc import Callable

# Past this many doublings any base has passed any cap a caller uses.
_MAX_DOUBLINGS = 64


def doubling(base: float, cap: float, attempt: int) -> float:
    """``base`` for attempt 1, then ``2 * base``, ``4 * base``, ..., never above ``cap``
    (attempt 0 or less counts as 1)."""
    exponent = min(max(0, attempt - 1), _MAX_DOUBLINGS)
    return min(cap, base * 2.0**exponent)


def jittered(
    delay: float,
    start: float,
    end: float,
    draw: Callable[[], float] = random.random,
) -> float:
    """``delay`` times a factor drawn evenly between ``start`` (``draw()`` of 0) and ``end``
    (of 1): groups that failed, or fell due, together wake apart instead of as one herd.
    Not for secrets: the draw needs to be even, not unpredictable."""
    return delay * (start + (end - start) * draw())
