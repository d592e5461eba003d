"""Tools loaded by the server under test via AGENT_TOOLS (see conftest)."""

from __future__ import annotations

import asyncio


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def slow_echo(text: str, seconds: float = 1.0) -> str:
    """Wait `seconds` seconds, then return `text` unchanged."""
    await asyncio.sleep(seconds)
    return text
