"""How deep parsed JSON nests (kit/jsonlimits.py): the same answer as counting by recursion,
for any JSON, without recursion itself."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gitea_runner_operator.kit.jsonlimits import too_deep

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=40,
)


def depth(value: Any) -> int:
    """Containers nested, by recursion (the reference)."""
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


@given(json_values, st.integers(min_value=1, max_value=8))
def test_too_deep_agrees_with_counting_by_recursion(value: Any, limit: int) -> None:
    assert too_deep(value, limit) == (depth(value) > limit)


def test_a_nesting_far_past_the_recursion_limit_is_measured() -> None:
    value: Any = "leaf"
    for _ in range(100_000):
        value = [value]
    assert too_deep(value, 20)
    assert not too_deep([["a"] * 64, {"labels": ["b"] * 64}], 3)
    assert too_deep([["a"] * 64, {"labels": [["b"]]}], 3)
