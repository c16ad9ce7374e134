"""Jobs we are creating or created that the informer has not shown us yet.

A watch can deliver a new Job before its create returns, or long after. Like client-go's
ControllerExpectations we record what we expect *before* acting, and since we choose Job
names ourselves we expect names, not counts: a pending name stops counting the moment the
informer cache holds it, so a Job is never counted twice (once as pending, once as seen) and
never zero times. The memory only bridges watch lag: a restarted operator lists the cluster
afresh, so nothing depends on it surviving.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection


class Expectations:
    def __init__(self, timeout: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._timeout = timeout
        self._clock = clock
        self._pending: dict[str, dict[str, float]] = {}

    def expect(self, key: str, job_name: str) -> None:
        self._pending.setdefault(key, {})[job_name] = self._clock() + self._timeout

    def lower(self, key: str, job_name: str) -> None:
        """The create failed, or the Job was seen: stop expecting it."""
        names = self._pending.get(key)
        if names is not None:
            names.pop(job_name, None)
            if not names:
                del self._pending[key]

    observed = lower

    def pending(self, key: str, present: Collection[str] = ()) -> int:
        """Expected Jobs not (yet) in ``present``, the names the cache holds now."""
        names = self._pending.get(key)
        if not names:
            return 0
        now = self._clock()
        for name in [n for n, deadline in names.items() if deadline <= now or n in present]:
            del names[name]
        if not names:
            del self._pending[key]
        return len(names)

    def names(self, key: str) -> set[str]:
        """The Jobs expected now (lapsed ones included until ``pending`` drops them)."""
        return set(self._pending.get(key, ()))

    def next_lapse(self, key: str) -> float | None:
        """Seconds until the soonest expectation of the group lapses; None if none is
        pending. A lapsed expectation changes what the group may create with nothing else
        changing, so the pass asks to come back then (reconcile/timers.py)."""
        names = self._pending.get(key)
        if not names:
            return None
        return max(0.0, min(names.values()) - self._clock())

    def forget(self, key: str) -> None:
        self._pending.pop(key, None)

    def knows(self, key: str) -> bool:
        return key in self._pending

    def keys(self) -> list[str]:
        return list(self._pending)
