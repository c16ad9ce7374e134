"""Log lines that someone else can cause, at most one per cause per interval.

A tenant (a Gitea answer, a RunnerGroup spec) or a stalled loop can make the same warning
true thousands of times a minute; written every time, the lines drown the log and cost the
loop the writing. Each cause gets one line per interval, and the next line it writes says
how many were held back, so nothing goes unnoticed and nothing floods.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import Final

from gitea_runner_operator.kit.lru import LRU

# Causes remembered at most: a stream of new causes (new groups, new label sets) costs a
# bounded table, and a forgotten cause only logs its next line early.
MAX_CAUSES: Final = 4096


class LogRate:
    """Admits the first line of a cause, then one per ``interval`` seconds."""

    def __init__(
        self,
        interval: float,
        *,
        max_keys: int = MAX_CAUSES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._interval = interval
        self._clock = clock
        # cause -> [when its last line went out, lines held back since]; oldest first
        self._causes: LRU[Hashable, list[float]] = LRU(max_keys)

    def __len__(self) -> int:
        return len(self._causes)

    def __contains__(self, cause: object) -> bool:
        """Whether a line of this cause went out lately (its first is still remembered)."""
        return cause in self._causes

    def admit(self, cause: Hashable) -> int | None:
        """None: hold this line back (it is counted). Otherwise write it now, with the
        returned number of lines of this cause held back since its last one."""
        now = self._clock()
        kept = self._causes.peek(cause)
        if kept is not None and now - kept[0] < self._interval:
            kept[1] += 1
            return None
        held = int(kept[1]) if kept is not None else 0
        self._causes.put(cause, [now, 0])
        return held
