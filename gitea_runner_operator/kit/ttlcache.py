"""The one TTL memo: answers kept by key for a time-to-live, bounded in entries and, when
asked, in bytes, with one eviction policy (expired entries first, then the oldest).

Written once so that the Secret store, the ConfigMap reader, the webhook secret reader and
the forge flavour memo cannot drift apart in how long they trust an answer or how much
memory a stream of new keys may cost.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import KW_ONLY, dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Kept(Generic[V]):
    """One remembered answer: its value, when it was stored, when it expires, its weight."""

    value: V
    at: float
    expires: float
    size: int = 0


@dataclass(eq=False)
class TTLCache(Generic[K, V]):
    """``ttl`` is the default life of an entry (``put`` may give another, e.g. a shorter one
    for answers a user fixes by hand). ``sweep_every``: expired entries are also dropped on
    reads, at most this often, so memory follows the keys in use, not the most ever seen."""

    ttl: float
    _: KW_ONLY
    max_entries: int
    max_bytes: int | None = None
    sweep_every: float | None = None
    clock: Callable[[], float] = time.monotonic
    _kept: dict[K, Kept[V]] = field(default_factory=dict, init=False)  # oldest first
    _bytes: int = field(default=0, init=False)
    _swept: float = field(init=False)

    def __post_init__(self) -> None:
        self._swept = self.clock()

    def __len__(self) -> int:
        return len(self._kept)

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._kept))

    def __repr__(self) -> str:  # the values' own reprs decide what shows (LentSecret: no data)
        return f"TTLCache({ {k: kept.value for k, kept in self._kept.items()}!r})"

    def values(self) -> list[V]:
        """Every kept value, expired ones included (for inspection, not for answers)."""
        return [kept.value for kept in self._kept.values()]

    @property
    def bytes(self) -> int:
        """The sum of the kept entries' sizes."""
        return self._bytes

    def entry(self, key: K) -> Kept[V] | None:
        """The fresh entry for ``key``, or None (an expired one stays for :meth:`peek` until
        a sweep or a put makes room)."""
        now = self.clock()
        if self.sweep_every is not None and now - self._swept >= self.sweep_every:
            self.sweep()
        kept = self._kept.get(key)
        return kept if kept is not None and kept.expires > now else None

    def get(self, key: K) -> V | None:
        kept = self.entry(key)
        return kept.value if kept is not None else None

    def peek(self, key: K) -> Kept[V] | None:
        """The entry for ``key`` even if expired (a last answer to fall back on)."""
        return self._kept.get(key)

    def put(self, key: K, value: V, *, ttl: float | None = None, size: int = 0) -> bool:
        """Remember ``value``; False when it alone weighs more than ``max_bytes`` (then
        nothing is kept for ``key``)."""
        self.pop(key)  # re-inserted: the order stays oldest first
        if self.max_bytes is not None and size > self.max_bytes:
            return False
        now = self.clock()
        if self._full(size):
            self.sweep()
        while self._kept and self._full(size):
            self.pop(next(iter(self._kept)))
        self._kept[key] = Kept(value, now, now + (self.ttl if ttl is None else ttl), size)
        self._bytes += size
        return True

    def pop(self, key: K) -> Kept[V] | None:
        kept = self._kept.pop(key, None)
        if kept is not None:
            self._bytes -= kept.size
        return kept

    def retain(self, keep: Callable[[K], bool]) -> None:
        """Drop every entry whose key ``keep`` refuses (e.g. of namespaces no group uses)."""
        for key in [k for k in self._kept if not keep(k)]:
            self.pop(key)

    def sweep(self) -> None:
        """Drop every expired entry."""
        now = self.clock()
        self._swept = now
        for key in [k for k, kept in self._kept.items() if kept.expires <= now]:
            self.pop(key)

    def _full(self, size: int) -> bool:
        if len(self._kept) >= self.max_entries:
            return True
        return self.max_bytes is not None and self._bytes + size > self.max_bytes
