"""The one token bucket's arithmetic: ``rate`` tokens a second, at most ``burst`` saved up
(client-go's QPS and burst). Written once for the write limit (kube/ratelimit.py, which adds
its fair queue of waiters), the scrape reviews of unknown tokens (kube/reviews.py) and the
wake-ups per group (webhook/wakes.py) and the first polls of new poll tasks
(poll/pollers.py), so none of them can refill or cap on its own terms.
"""

from __future__ import annotations


class Bucket:
    """The level at one moment; the level at any later moment follows from it. ``tokens``
    may go below zero: a debt (an API server's Retry-After) that refills like any level."""

    __slots__ = ("at", "burst", "rate", "tokens")

    def __init__(self, rate: float, burst: float, now: float, tokens: float | None = None) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.tokens = self.burst if tokens is None else tokens
        self.at = now

    def level(self, now: float) -> float:
        """The tokens there would be at ``now``, without counting them in."""
        return min(self.burst, self.tokens + (now - self.at) * self.rate)

    def refill(self, now: float) -> float:
        """Count in what came since the last refill; the level at ``now``."""
        self.tokens = self.level(now)
        self.at = now
        return self.tokens

    def take(self, now: float) -> bool:
        """Spend one token if there is one at ``now``."""
        if self.refill(now) < 1:
            return False
        self.tokens -= 1
        return True

    def reserve(self, now: float) -> float:
        """Spend one token, in debt if there is none: the seconds until it would have been
        there (0 when it was). A caller that must go, only later, waits that long."""
        self.tokens = self.refill(now) - 1
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate
