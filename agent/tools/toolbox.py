"""Toolbox: the tools a turn may call, merged from every provider.

It runs the tool calls of one model response concurrently and turns every failure (exception,
timeout, unknown tool, arguments that fail the schema) into an error result the model sees: tools
never crash a turn.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from agent.tools.base import ToolError, ToolNeedsInput, ToolProvider, ToolResult, ToolSpec
from agent.tools.function import FunctionTool, FunctionToolProvider
from agent.tools.outputs import TaskRejected, split_output
from stores.models import ToolCall

logger = logging.getLogger(__name__)

TOOL_CONCURRENCY = 5
"""Tool calls of one model response run at once unless configured (AGENT_TOOL_CONCURRENCY)."""
TOOL_TIMEOUT_S = 30.0
"""Timeout of one tool call unless configured (AGENT_TOOL_TIMEOUT_S)."""


class Toolbox:
    """The tools a turn may call, from every provider, and how their calls are run."""

    def __init__(
        self,
        tools: Iterable[FunctionTool] = (),
        *,
        providers: Iterable[ToolProvider] = (),
        concurrency: int = TOOL_CONCURRENCY,
        timeout_s: float = TOOL_TIMEOUT_S,
    ) -> None:
        self._local = FunctionToolProvider(tools)
        self.providers: list[ToolProvider] = [self._local, *providers]
        self._concurrency = concurrency
        self._timeout_s = timeout_s
        self._routes: dict[str, tuple[ToolProvider, str]] = {}
        self._specs: list[ToolSpec] = []
        self.version = 0
        """Bumped whenever the listed tools change: what shows the tools (the card) rebuilds."""
        self._refreshing: set[asyncio.Task[list[ToolSpec]]] = set()
        for provider in self.providers:
            provider.on_change(self._changed)
        self._route(self._local, self._local_specs())

    @property
    def tools(self) -> list[FunctionTool]:
        """The local function tools."""
        return list(self._local.tools.values())

    @property
    def specs(self) -> list[ToolSpec]:
        """Every tool, as last listed (the local ones until the providers have started)."""
        return list(self._specs)

    def _local_specs(self) -> list[ToolSpec]:
        return [tool.spec() for tool in self._local.tools.values()]

    def _changed(self) -> None:
        """A provider's list changed: list again now, not at the next model call, so the card
        shows it too."""
        try:
            job = asyncio.get_running_loop().create_task(self.refresh())
        except RuntimeError:  # no loop (outside the app): the next listing sees it
            return
        self._refreshing.add(job)
        job.add_done_callback(self._refreshing.discard)

    async def start(self) -> None:
        """Start every provider (one that fails says so in its status), then list the tools."""

        async def start(provider: ToolProvider) -> None:
            try:
                await provider.start()
            except Exception as exc:  # a broken source must not keep the server down
                logger.warning("tools=<%s> | the tool source did not start: %s", provider.name, exc)

        await asyncio.gather(*(start(provider) for provider in self.providers))
        await self.refresh()

    async def aclose(self) -> None:
        for provider in self.providers:
            try:
                await provider.aclose()
            except Exception as exc:
                logger.warning(
                    "tools=<%s> | closing the tool source failed: %s", provider.name, exc
                )

    def statuses(self) -> dict[str, str | None]:
        """Each provider's status: None when up, else why not."""
        return {provider.name: provider.status() for provider in self.providers}

    async def refresh(self, turn: Any = None) -> list[ToolSpec]:
        """List every provider's tools (for this turn) and route names to them."""
        listed: list[tuple[ToolProvider, list[ToolSpec]]] = []
        for provider in self.providers:
            try:
                listed.append((provider, await provider.list_tools(turn)))
            except Exception as exc:
                logger.warning("tools=<%s> | listing the tools failed: %s", provider.name, exc)
        before = self._specs
        self._routes.clear()
        self._specs = []
        counts: dict[str, int] = {}
        for _, specs in listed:
            for spec in specs:
                counts[spec.name] = counts.get(spec.name, 0) + 1
        for provider, specs in listed:
            qualified = [
                spec
                if counts[spec.name] == 1 or provider is self._local
                else ToolSpec(
                    name=f"{provider.name}_{spec.name}",
                    description=spec.description,
                    parameters=spec.parameters,
                )
                for spec in specs
            ]
            self._route(provider, qualified, original=specs)
        if self._specs != before:
            self.version += 1
        return list(self._specs)

    def _route(
        self,
        provider: ToolProvider,
        specs: list[ToolSpec],
        *,
        original: list[ToolSpec] | None = None,
    ) -> None:
        for spec, source in zip(specs, original or specs, strict=True):
            self._routes[spec.name] = (provider, source.name)
            self._specs.append(spec)

    def schemas(self) -> list[dict[str, Any]]:
        return [spec.schema() for spec in self._specs]

    async def schemas_for(self, turn: Any = None) -> list[dict[str, Any]]:
        """The tools for a model call: listed again when there are other sources than functions
        (their lists may change, or depend on the turn), else as they are."""
        if len(self.providers) > 1:
            await self.refresh(turn)
        return self.schemas()

    async def run(
        self,
        calls: list[ToolCall],
        *,
        execute: Callable[[ToolCall], Awaitable[ToolResult]] | None = None,
        on_start: Callable[[ToolCall], None] = lambda call: None,
        on_finish: Callable[[ToolResult], None] = lambda result: None,
    ) -> list[ToolResult]:
        """Run calls concurrently (bounded); results come back in call order."""
        gate = asyncio.Semaphore(self._concurrency)
        run_call = execute or self.execute

        async def run_one(call: ToolCall) -> ToolResult:
            async with gate:
                on_start(call)
                result = await run_call(call)
                on_finish(result)
                return result

        jobs = [asyncio.ensure_future(run_one(call)) for call in calls]
        try:
            return list(await asyncio.gather(*jobs))
        except BaseException:
            # One call failed outside the tool (a hook) or the turn was canceled: stop the rest.
            for job in jobs:
                job.cancel()
            await asyncio.wait(jobs, timeout=1.0)
            raise

    async def execute(
        self, call: ToolCall, turn: Any = None, *, answer: tuple[dict[str, Any], str] | None = None
    ) -> ToolResult:
        """Run one call (`answer`: go on with a call that waited for the user, with its saved
        state and the user's answer); every failure becomes an error result."""

        def failed(message: str) -> ToolResult:
            return ToolResult(
                call_id=call.id, name=call.name, content=f"Error: {message}", ok=False
            )

        route = self._routes.get(call.name)
        if route is None:
            known = ", ".join(sorted(self._routes)) or "none"
            return failed(f"unknown tool {call.name!r} (available: {known})")
        provider, name = route
        try:
            raw = json.loads(call.arguments) if call.arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return failed(f"arguments of {call.name!r} are not valid JSON: {exc}")
        if not isinstance(raw, dict):
            return failed(f"arguments of {call.name!r} must be a JSON object")
        running = (
            provider.call(name, raw, turn)
            if answer is None
            else provider.resume(name, answer[0], answer[1], turn)
        )
        try:
            value = await asyncio.wait_for(running, self._timeout_s)
        except TimeoutError:
            return failed(f"tool {call.name!r} timed out after {self._timeout_s:g} s")
        except ToolError as exc:
            return failed(str(exc))
        except ToolNeedsInput as exc:
            return ToolResult(call_id=call.id, name=call.name, content="", ok=True, needs_input=exc)
        except TaskRejected:
            raise  # not a tool error: the turn ends, rejected
        except Exception as exc:
            logger.info("tool=<%s> | tool raised %s", call.name, type(exc).__name__)
            return failed(f"tool {call.name!r} raised {type(exc).__name__}: {exc}")
        value, artifacts = split_output(value)
        content = value if isinstance(value, str) else json.dumps(value, default=str)
        return ToolResult(
            call_id=call.id, name=call.name, content=content, ok=True, artifacts=tuple(artifacts)
        )

    async def abandon(self, call: ToolCall, state: dict[str, Any]) -> None:
        """A call that waited for the user will not go on (its task was canceled)."""
        route = self._routes.get(call.name)
        if route is None:
            return
        provider, name = route
        try:
            await asyncio.wait_for(provider.abandon(name, state), self._timeout_s)
        except Exception as exc:  # best effort: the cancel itself has happened
            logger.info("tool=<%s> | letting go of a waiting call failed: %s", call.name, exc)
