"""Tools loaded (via AGENT_TOOLS) by the servers of the agent-engine end-to-end tests."""

from __future__ import annotations

import asyncio

from tests.fakes.tools import add


async def sleepy(seconds: float) -> str:
    """Sleep for `seconds` seconds, then say how long it slept."""
    await asyncio.sleep(seconds)
    return f"slept {seconds:g}"


def flaky(x: int) -> int:
    """Always fails (a broken tool)."""
    raise ValueError("boom")


def secret_action(target: str) -> str:
    """Do something sensitive to `target` (needs a human's approval)."""
    return f"secret action done on {target}"


def forbidden(target: str) -> str:
    """A tool the engine_hooks policy never lets run."""
    return f"FORBIDDEN TOOL RAN on {target}"


def lookup(key: str) -> str:
    """Look a key up; the engine_hooks policy answers it instead of this function."""
    return f"REAL LOOKUP RAN for {key}"


def explosive(x: int) -> int:
    """A tool whose approval hook raises."""
    return x


ALL = [sleepy, flaky, add, secret_action, forbidden, lookup, explosive]
