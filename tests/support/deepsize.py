"""Bytes a value keeps, counted the way a tenant's input would be paid for: every object
reachable through containers and model fields, each counted once (shared strings too)."""

from __future__ import annotations

import sys
from typing import Any

from pydantic import BaseModel


def deep_size(value: Any) -> int:
    """``sys.getsizeof`` summed over everything ``value`` reaches; iterative, so deep values
    cannot hit the recursion limit."""
    seen: set[int] = set()
    stack = [value]
    total = 0
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend(item)
        elif isinstance(item, BaseModel):
            stack.append(item.__dict__)
        elif hasattr(item, "__slots__"):
            stack.extend(getattr(item, s) for s in item.__slots__ if hasattr(item, s))
    return total
