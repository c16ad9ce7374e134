"""Fixtures the unit folders share."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gitea_runner_operator.forge.client import SessionPool


@pytest.fixture
async def sessions() -> AsyncIterator[SessionPool]:
    """Gitea HTTP sessions for an Observer under test, closed after it."""
    pool = SessionPool()
    yield pool
    await pool.close()
