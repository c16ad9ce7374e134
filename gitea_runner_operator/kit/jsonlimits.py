"""How deep parsed JSON nests, measured without recursion: the forge client and the webhook
receiver both refuse answers and bodies nested past a bound (one rule, one place)."""

from __future__ import annotations

from typing import Any


def too_deep(value: Any, limit: int) -> bool:
    """Whether parsed JSON nests deeper than ``limit``; iterative, so it cannot itself hit
    the recursion limit, and linear in the size of what was parsed."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children: Any
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False
