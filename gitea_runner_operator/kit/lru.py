"""The one bounded LRU: at most ``max_entries`` keys, the least recently used dropped first.

Written once for the memos that must not grow with what a stranger sends (webhook delivery
ids, wake-up buckets per group, refusal and warning times, log lines held back per cause,
Forgejo repository names, runner config verdicts, job ids already counted, the cache
servers' last findings per group), so none of them can get the eviction order or the bound
wrong on its own. ``kit/ttlcache`` is the other memo: answers that expire, oldest
*stored* first; here an entry lives as long as it is used.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRU(Generic[K, V]):
    """:meth:`get` and :meth:`put` count as a use; :meth:`peek` and :meth:`replace` do not
    (a read that decides nothing, or an update of a count, must not keep a key alive)."""

    def __init__(self, max_entries: int) -> None:
        if max_entries < 0:
            raise ValueError("max_entries must be >= 0")
        self.max_entries = max_entries
        self._kept: OrderedDict[K, V] = OrderedDict()  # least recently used first

    def __len__(self) -> int:
        return len(self._kept)

    def __contains__(self, key: object) -> bool:
        return key in self._kept

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._kept))

    def get(self, key: K) -> V | None:
        """The value for ``key`` (None when not kept), now the most recently used."""
        if key not in self._kept:
            return None
        self._kept.move_to_end(key)
        return self._kept[key]

    def peek(self, key: K) -> V | None:
        return self._kept.get(key)

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` as the most recently used; the least recently used go past the
        bound."""
        self._kept[key] = value
        self._kept.move_to_end(key)
        while len(self._kept) > self.max_entries:
            self._kept.popitem(last=False)

    def replace(self, key: K, value: V) -> None:
        """A new value for a kept ``key``, in its place in the order."""
        if key not in self._kept:
            raise KeyError(key)
        self._kept[key] = value

    def oldest(self) -> V | None:
        """The least recently used value (for a caller that also expires by age)."""
        return next(iter(self._kept.values()), None)

    def drop_oldest(self) -> None:
        self._kept.popitem(last=False)

    def pop(self, key: K) -> V | None:
        return self._kept.pop(key, None)

    def clear(self) -> None:
        self._kept.clear()
