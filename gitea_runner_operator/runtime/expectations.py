"""Jobs we created that the informer has not shown us yet.

A create returns before the watch delivers the new Job, so a reconcile in that gap would see
too few runners and create again. Like the ReplicaSet controller, we remember such creations
for a short while and count them as starting runners. This memory only bridges watch lag: a
restarted operator lists the cluster afresh, so nothing depends on it surviving.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Expectations:
    def __init__(self, timeout: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._timeout = timeout
        self._clock = clock
        self._pending: dict[str, dict[str, float]] = {}

    def expect(self, key: str, job_name: str) -> None:
        self._pending.setdefault(key, {})[job_name] = self._clock() + self._timeout

    def observed(self, key: str, job_name: str) -> None:
        names = self._pending.get(key)
        if names is not None:
            names.pop(job_name, None)
            if not names:
                del self._pending[key]

    def pending(self, key: str) -> int:
        names = self._pending.get(key)
        if not names:
            return 0
        now = self._clock()
        for name in [n for n, deadline in names.items() if deadline <= now]:
            del names[name]
        return len(names)

    def forget(self, key: str) -> None:
        self._pending.pop(key, None)
