"""Items of a forge answer refused past a cap: counted, and logged at most once per cause and
Gitea per interval with the count of what was suppressed since.

A tenant chooses its Gitea, so it chooses how many refused items there are: one log line per
item would let it fill the operator's log (and spend the loop formatting it). Bounded in
keys too: past ``MAX_KEYS`` causes, the oldest is forgotten.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

import structlog

from gitea_runner_operator.kit.lru import LRU

log = structlog.get_logger(__name__)

INTERVAL: Final = 300.0
MAX_KEYS: Final = 1024


class Refusals:
    """When each (Gitea, cause) was last logged, and how many refusals went unlogged since."""

    def __init__(
        self,
        interval: float = INTERVAL,
        max_keys: int = MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._interval, self._clock = interval, clock
        self._seen: LRU[tuple[str, str], tuple[float, int]] = LRU(max_keys)
        self.total = 0

    def clear(self) -> None:
        self._seen.clear()
        self.total = 0

    def suppressed(self, gitea: str, cause: str) -> int:
        return (self._seen.peek((gitea, cause)) or (0.0, 0))[1]

    def refuse(self, gitea: str, cause: str, where: str) -> None:
        self.total += 1
        key = (gitea, cause)
        now = self._clock()
        last = self._seen.peek(key)
        if last is not None and now - last[0] < self._interval:
            self._seen.replace(key, (last[0], last[1] + 1))
            return
        log.warning(
            "forge answer item refused",
            gitea=gitea,
            cause=cause,
            where=where,
            suppressed=last[1] if last is not None else 0,
        )
        self._seen.put(key, (now, 0))


REFUSALS = Refusals()
