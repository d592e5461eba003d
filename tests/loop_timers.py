"""The timers an asyncio loop holds: what the footprint tests count."""

from __future__ import annotations

import asyncio


def live_timers(loop: asyncio.AbstractEventLoop) -> int:
    """Timers scheduled on `loop` and not cancelled."""
    scheduled: list[asyncio.TimerHandle] = loop._scheduled  # type: ignore[attr-defined]
    return sum(1 for timer in scheduled if not timer.cancelled())
