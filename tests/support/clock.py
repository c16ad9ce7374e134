"""A clock that moves only when the code under test sleeps: pacing without real waiting."""

from __future__ import annotations

import asyncio


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)
