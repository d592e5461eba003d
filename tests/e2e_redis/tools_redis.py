"""Tools loaded by the replicas under test (AGENT_TOOLS, see conftest).

`slow_tool` writes one line when it starts and one when it ends to `$E2E_REDIS_TOOL_LOG`, so a test
can count how many times (and in which process) a tool call actually ran.
"""

from __future__ import annotations

import asyncio
import os


def _log(line: str) -> None:
    path = os.environ.get("E2E_REDIS_TOOL_LOG")
    if not path:
        return
    # O_APPEND: each short write lands whole, even with two processes appending.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


async def slow_tool(seconds: float, tag: str = "") -> str:
    """Wait `seconds` seconds, then say so. `tag` only labels the call in the test's log."""
    _log(f"start {tag} {os.getpid()}")
    await asyncio.sleep(seconds)
    _log(f"end {tag} {os.getpid()}")
    return f"slept {seconds}s"
