"""An MCP server for the tests (the official SDK's FastMCP), over stdio or streamable HTTP.

    python server.py stdio
    python server.py http PORT

Tools: `add(a, b)`, `slow(seconds)`, `crash()` (the process exits mid-call), `shout(text)`,
`unlock()` (adds `secret()` and says the list changed).
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.fastmcp import Context, FastMCP

port = int(sys.argv[2]) if len(sys.argv) > 2 else 8000
server = FastMCP("test-tools", host="127.0.0.1", port=port, log_level="WARNING")


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return f"{a} + {b} = {a + b}"


@server.tool()
async def slow(seconds: float) -> str:
    """Wait, then answer."""
    await asyncio.sleep(seconds)
    return "slept"


@server.tool()
def crash() -> str:
    """Exit the server process in the middle of the call."""
    os._exit(3)


@server.tool()
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


def secret() -> str:
    """Tell the secret (only after `unlock`)."""
    return "the secret is 42"


@server.tool()
async def unlock(ctx: Context) -> str:
    """Add the `secret` tool, and tell the client that the tool list changed."""
    server.add_tool(secret)
    await ctx.session.send_tool_list_changed()
    return "unlocked"


if __name__ == "__main__":
    server.run(transport="stdio" if sys.argv[1] == "stdio" else "streamable-http")
