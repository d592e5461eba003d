"""Function tools: plain Python functions described to the model by their type hints and
docstrings. `FunctionTool` derives the name, description and JSON schema from a function;
`FunctionToolProvider` serves a set of them as one tool source.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, ValidationError, create_model

from agent.tools.base import ToolError, ToolLoadError, ToolProvider, ToolSpec

if TYPE_CHECKING:
    from agent.context import TurnContext

logger = logging.getLogger(__name__)

ToolFunction = Callable[..., Any] | Callable[..., Awaitable[Any]]


class FunctionTool:
    """A sync or async function with type hints and a docstring, exposed as a tool."""

    def __init__(self, function: ToolFunction) -> None:
        if not callable(function) or not hasattr(function, "__name__"):
            raise ToolLoadError(f"{function!r} is not a function")
        self.function = function
        self.name = function.__name__
        summary, arg_docs = _parse_docstring(inspect.getdoc(function) or "")
        if not summary:
            raise ToolLoadError(f"tool {self.name!r} needs a docstring to describe it to the model")
        self.description = summary
        self._arguments_model = _arguments_model(function, arg_docs)
        self.parameters: dict[str, Any] = self._arguments_model.model_json_schema()
        self.parameters.pop("title", None)
        self._is_async = inspect.iscoroutinefunction(function)

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    def schema(self) -> dict[str, Any]:
        """The OpenAI-style function description sent to the model."""
        return self.spec().schema()

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """Check arguments against the schema; raises ValidationError."""
        validated = self._arguments_model.model_validate(arguments)
        return {name: getattr(validated, name) for name in type(validated).model_fields}

    async def __call__(self, arguments: dict[str, Any]) -> Any:
        if self._is_async:
            return await self.function(**arguments)
        # A sync tool runs in a worker thread so it cannot stall the event loop.
        return await asyncio.to_thread(self.function, **arguments)


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The summary (text before any section) and the Google-style `Args:` descriptions."""
    summary_lines: list[str] = []
    args: dict[str, str] = {}
    section = None
    current: str | None = None
    entry_indent = 0
    for line in doc.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if re.fullmatch(r"[A-Z][A-Za-z ]*:", stripped):
            section, current = stripped[:-1].lower(), None
            continue
        if section is None:
            summary_lines.append(stripped)
        elif section in ("args", "arguments", "parameters") and stripped:
            match = re.match(r"(\w+)(?:\s*\(.*?\))?:\s*(.*)", stripped)
            if match and (current is None or indent <= entry_indent):
                current, entry_indent = match.group(1), indent
                args[current] = match.group(2)
            elif current is not None:  # a description wrapped onto the next, deeper line
                args[current] = f"{args[current]} {stripped}".strip()
    return " ".join(line for line in summary_lines if line).strip(), args


def _arguments_model(function: ToolFunction, arg_docs: dict[str, str]) -> Any:
    from pydantic import Field

    signature = inspect.signature(function)
    try:
        hints = inspect.get_annotations(function, eval_str=True)
    except Exception as exc:
        raise ToolLoadError(f"cannot read the type hints of {function.__name__!r}: {exc}") from exc
    fields: dict[str, Any] = {}
    for name, parameter in signature.parameters.items():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ToolLoadError(f"tool {function.__name__!r} cannot take *args or **kwargs")
        if name not in hints:
            raise ToolLoadError(
                f"parameter {name!r} of tool {function.__name__!r} has no type hint"
            )
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[name] = (hints[name], Field(default, description=arg_docs.get(name)))
    return create_model(
        f"{function.__name__}_arguments", __config__=ConfigDict(extra="forbid"), **fields
    )


def load_tool_functions(references: Iterable[str]) -> list[FunctionTool]:
    """Import `module:attribute` references; an attribute is a function or a list of functions."""
    tools: list[FunctionTool] = []
    for reference in references:
        module_name, _, attribute = reference.partition(":")
        if not module_name or not attribute:
            raise ToolLoadError(f"tool reference {reference!r} is not of the form module:attribute")
        try:
            target = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            raise ToolLoadError(f"cannot load tool {reference!r}: {exc}") from exc
        functions = target if isinstance(target, list | tuple) else [target]
        tools.extend(FunctionTool(function) for function in functions)
    return tools


class FunctionToolProvider(ToolProvider):
    """Local Python functions (`FunctionTool`s), validated against their signature."""

    name = "local"

    def __init__(self, tools: Iterable[FunctionTool]) -> None:
        super().__init__()
        self.tools: dict[str, FunctionTool] = {}
        for tool in tools:
            if tool.name in self.tools:
                raise ToolLoadError(f"two tools are named {tool.name!r}")
            self.tools[tool.name] = tool

    async def list_tools(self, turn: TurnContext | None = None) -> list[ToolSpec]:
        return [tool.spec() for tool in self.tools.values()]

    async def call(self, name: str, arguments: dict[str, Any], turn: TurnContext | None) -> Any:
        tool = self.tools[name]
        try:
            validated = tool.validate(arguments)
        except ValidationError as exc:
            details = "; ".join(
                f"{'.'.join(str(p) for p in error['loc']) or 'arguments'}: {error['msg']}"
                for error in exc.errors()
            )
            raise ToolError(f"invalid arguments for {name!r}: {details}") from exc
        return await tool(validated)
