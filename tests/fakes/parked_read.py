"""A read that never finds anything: it waits until it is cancelled, and records that it was."""

from __future__ import annotations

import asyncio


class ParkedRead:
    def __init__(self) -> None:
        self.cancelled = asyncio.Event()

    async def __call__(self) -> list[int]:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return [1]
