"""Tools from MCP servers, with the official `mcp` SDK: stdio (a command) or streamable HTTP.

Each configured server is a `ToolProvider` whose session is held open by a task of its own (the
SDK's transports are anyio contexts: entered and left in one task). It connects at startup and
reconnects with backoff when the session drops (a ping every `PING_S` notices a dead server
between calls); its tool list is refreshed on connect and on the server's `tools/list_changed`
notification. A call that does not answer within the timeout, or a server that is down, is a tool
error with a clear message: never a hung turn.

`AGENT_MCP_SERVERS` uses the common `mcpServers` shape (Claude Desktop, Cursor, VS Code):

    {"mcpServers": {"files": {"command": "npx", "args": ["-y", "server-files"], "env": {}},
                    "search": {"url": "https://mcp.example/mcp", "headers": {"X-Key": "k"}}}}

as inline JSON, or the path of a JSON or YAML file holding it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.tools.base import ToolError, ToolProvider, ToolSpec
from agent.tools.outputs import DataResult
from agent.tools.toolbox import TOOL_TIMEOUT_S

if TYPE_CHECKING:
    from agent.context import TurnContext

logger = logging.getLogger(__name__)

PING_S = 10.0
MAX_BACKOFF_S = 30.0


class MCPConfigError(ValueError):
    """AGENT_MCP_SERVERS does not parse, or a server entry is not usable."""


@dataclass(frozen=True, kw_only=True)
class MCPServerConfig:
    name: str
    command: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


def _entry(name: str, raw: Any) -> MCPServerConfig:
    if not isinstance(raw, dict):
        raise MCPConfigError(f"MCP server {name!r}: an entry must be an object")
    command, url = raw.get("command"), raw.get("url")
    if (command is None) == (url is None):
        raise MCPConfigError(f"MCP server {name!r}: give exactly one of `command` or `url`")
    args, env, headers = raw.get("args", []), raw.get("env", {}), raw.get("headers", {})
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise MCPConfigError(f"MCP server {name!r}: `args` must be a list of strings")
    for what, mapping in (("env", env), ("headers", headers)):
        if not isinstance(mapping, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
        ):
            raise MCPConfigError(f"MCP server {name!r}: `{what}` must map strings to strings")
    if url is not None and not str(url).startswith(("http://", "https://")):
        raise MCPConfigError(f"MCP server {name!r}: `url` must be an http(s) URL")
    return MCPServerConfig(name=name, command=command, args=args, env=env, url=url, headers=headers)


def parse_mcp_servers(value: str) -> list[MCPServerConfig]:
    """AGENT_MCP_SERVERS: inline JSON (starts with `{`), or the path of a JSON or YAML file."""
    text, source = value, "AGENT_MCP_SERVERS"
    if not value.lstrip().startswith("{"):
        source = value
        try:
            text = Path(value).read_text(encoding="utf-8")
        except OSError as exc:
            raise MCPConfigError(f"cannot read the MCP servers file {value!r}: {exc}") from exc
    try:
        if source.endswith((".yaml", ".yml")):
            import yaml  # type: ignore[import-untyped]  # only for a YAML file

            document = yaml.safe_load(text)
        else:
            document = json.loads(text)
    except Exception as exc:
        raise MCPConfigError(f"{source} does not parse: {exc}") from exc
    if not isinstance(document, dict):
        raise MCPConfigError(f"{source} must be an object of servers")
    servers = document.get("mcpServers", document)
    if not isinstance(servers, dict):
        raise MCPConfigError(f"{source}: `mcpServers` must be an object")
    return [_entry(name, raw) for name, raw in servers.items()]


def _result_value(result: Any) -> Any:
    """An MCP CallToolResult as a tool's return value: its text, or its structured content."""
    texts = [item.text for item in result.content if getattr(item, "type", None) == "text"]
    if result.isError:
        raise ToolError("; ".join(texts) or "the MCP tool reported an error")
    structured = getattr(result, "structuredContent", None)
    if structured is not None and not texts:
        return DataResult(name="result", data=structured)
    return "\n".join(texts)


class MCPToolProvider(ToolProvider):
    def __init__(
        self,
        config: MCPServerConfig,
        *,
        call_timeout_s: float = TOOL_TIMEOUT_S,
        connect_timeout_s: float = 10.0,
    ) -> None:
        super().__init__()
        self.name = config.name
        self._config = config
        self._call_timeout_s = call_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._session: Any = None
        self._tools: list[ToolSpec] = []
        self._status: str | None = "not connected yet"
        self._connected = asyncio.Event()
        self._drop = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None

    def status(self) -> str | None:
        return self._status

    async def start(self) -> None:
        self._keeper = asyncio.create_task(self._keep(), name=f"mcp {self.name}")
        # Wait for the first session a while (its tools are in the first card); a server that is
        # down was logged by the keeper, which goes on trying.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._connected.wait(), self._connect_timeout_s)

    async def aclose(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
            await asyncio.gather(self._keeper, return_exceptions=True)

    async def list_tools(self, turn: TurnContext | None = None) -> list[ToolSpec]:
        return list(self._tools)

    async def call(self, name: str, arguments: dict[str, Any], turn: TurnContext | None) -> Any:
        session = self._session
        if session is None:
            raise ToolError(f"MCP server {self.name!r} is not available: {self._status}")
        try:
            result = await asyncio.wait_for(
                session.call_tool(name, arguments), self._call_timeout_s
            )
        except TimeoutError as exc:
            raise ToolError(
                f"MCP server {self.name!r} did not answer {name!r} within"
                f" {self._call_timeout_s:g} s"
            ) from exc
        except ToolError:
            raise
        except Exception as exc:
            self._drop.set()  # the session is likely gone: reconnect
            raise ToolError(f"MCP server {self.name!r} failed calling {name!r}: {exc}") from exc
        return _result_value(result)

    async def _keep(self) -> None:
        """Hold a session open; reconnect with backoff whenever it drops."""
        backoff = 0.5
        while True:
            try:
                await self._session_until_dropped()
                backoff = 0.5
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # anyio wraps transport failures in groups
                reason = _describe(exc)
                if self._status != reason:
                    logger.warning(
                        "mcp=<%s> | the MCP server is down (its tools are left out until it is"
                        " back): %s",
                        self.name,
                        reason,
                    )
                self._status = reason
            finally:
                self._session = None
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def _session_until_dropped(self) -> None:
        from mcp import ClientSession

        async with AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._transport())
            session = await stack.enter_async_context(
                ClientSession(read, write, message_handler=self._on_message)
            )
            await asyncio.wait_for(session.initialize(), self._connect_timeout_s)
            self._session = session
            await self._list(session)
            if self._status is not None:
                logger.info("mcp=<%s>, tools=<%d> | connected", self.name, len(self._tools))
            self._status = None
            self._connected.set()
            self._drop.clear()
            while not self._drop.is_set():
                try:
                    await asyncio.wait_for(self._drop.wait(), PING_S)
                except TimeoutError:
                    await asyncio.wait_for(session.send_ping(), self._connect_timeout_s)
            raise ConnectionError("the session dropped")

    def _transport(self) -> Any:
        config = self._config
        if config.command is not None:
            from mcp import StdioServerParameters
            from mcp.client.stdio import stdio_client

            parameters = StdioServerParameters(
                command=config.command, args=config.args, env=config.env or None
            )
            return stdio_client(parameters)
        from mcp.client.streamable_http import streamablehttp_client

        return _two_streams(streamablehttp_client(config.url or "", headers=config.headers))

    async def _list(self, session: Any) -> None:
        listed = await asyncio.wait_for(session.list_tools(), self._connect_timeout_s)
        self._tools = [
            ToolSpec(
                name=tool.name,
                description=tool.description or tool.name,
                parameters=tool.inputSchema or {"type": "object"},
            )
            for tool in listed.tools
        ]
        self.changed()

    async def _on_message(self, message: Any) -> None:
        """The server's notifications: a changed tool list is listed again."""
        root = getattr(message, "root", None)
        if getattr(root, "method", None) == "notifications/tools/list_changed":
            session = self._session
            if session is not None:
                asyncio.get_running_loop().create_task(self._list(session))


class _two_streams:
    """The streamable HTTP client yields (read, write, get_session_id): keep the two streams."""

    def __init__(self, context: Any) -> None:
        self._context = context

    async def __aenter__(self) -> tuple[Any, Any]:
        read, write, _ = await self._context.__aenter__()
        return read, write

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._context.__aexit__(*exc)


def _describe(exc: BaseException) -> str:
    """The innermost cause of a failure, in one line (anyio wraps them in exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError):
        return f"the command does not exist ({exc.filename or exc})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
