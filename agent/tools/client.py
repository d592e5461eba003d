"""Tools only the calling application can run: declared with the message, run by the client.

A client lists them in the message's `metadata.clientTools` (`{"name", "description",
"parameters"}`, the parameters a JSON Schema); they hold for that task only. When the model calls
one, the turn suspends (TASK_STATE_INPUT_REQUIRED) with a data part
`{"toolCalls": [{"id", "name", "arguments"}]}`; the client runs them and answers on the same task
with a data part `{"toolResults": [{"id", "result"}]}` (or `"error"` instead of `"result"`), and
the turn goes on. See docs/client-tools.md.
"""

from __future__ import annotations

import json
import re
from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]
from pydantic import BaseModel

from stores.models import Message, ToolCall

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_CLIENT_TOOLS = 64


class ClientToolsInvalid(ValueError):
    """`metadata.clientTools` is not a usable declaration; the message names the tool."""


class ClientTool(BaseModel):
    name: str
    description: str = ""
    parameters: dict[str, Any] = {"type": "object"}

    def tool_schema(self) -> dict[str, Any]:
        """The OpenAI-style function description sent to the model."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description or self.name,
                "parameters": self.parameters,
            },
        }


def parse_client_tools(metadata: dict[str, Any] | None) -> list[ClientTool]:
    """The tools a message declares (none: []); ClientToolsInvalid naming the bad one."""
    declared = (metadata or {}).get("clientTools")
    if declared is None:
        return []
    if not isinstance(declared, list):
        raise ClientToolsInvalid("metadata.clientTools must be a list of tool declarations")
    if len(declared) > MAX_CLIENT_TOOLS:
        raise ClientToolsInvalid(f"metadata.clientTools declares more than {MAX_CLIENT_TOOLS}")
    tools: list[ClientTool] = []
    for index, entry in enumerate(declared):
        where = f"metadata.clientTools[{index}]"
        if not isinstance(entry, dict):
            raise ClientToolsInvalid(f"{where} must be an object")
        name = entry.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise ClientToolsInvalid(f"{where}.name must be 1-64 letters, digits, '_' or '-'")
        if name in {tool.name for tool in tools}:
            raise ClientToolsInvalid(f"client tool {name!r} is declared twice")
        description = entry.get("description", "")
        if not isinstance(description, str):
            raise ClientToolsInvalid(f"client tool {name!r}: description must be a string")
        parameters = entry.get("parameters", {"type": "object"})
        if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
            raise ClientToolsInvalid(
                f"client tool {name!r}: parameters must be a JSON Schema of type object"
            )
        try:
            Draft202012Validator.check_schema(parameters)
        except SchemaError as exc:
            raise ClientToolsInvalid(
                f"client tool {name!r}: parameters is not a valid JSON Schema: {exc.message}"
            ) from exc
        tools.append(ClientTool(name=name, description=description, parameters=parameters))
    return tools


def tool_calls_data(calls: list[ToolCall]) -> dict[str, Any]:
    """The data part of the question: the calls the client is to run."""

    def arguments(call: ToolCall) -> Any:
        try:
            return json.loads(call.arguments or "{}")
        except json.JSONDecodeError:
            return call.arguments

    return {
        "toolCalls": [
            {"id": call.id, "name": call.name, "arguments": arguments(call)} for call in calls
        ]
    }


def read_tool_results(message: Message, calls: list[ToolCall]) -> dict[str, tuple[str, bool]]:
    """The client's results, by call id: (what the model reads, ok). ValueError saying what is
    missing or malformed (the task keeps waiting)."""
    results = next(
        (
            part.data["toolResults"]
            for part in message.parts
            if isinstance(part.data, dict) and "toolResults" in part.data
        ),
        None,
    )
    if not isinstance(results, list):
        raise ValueError(
            'The task waits for client tool results: answer with a data part {"toolResults":'
            ' [{"id": ..., "result": ...}]}'
        )
    by_id: dict[str, tuple[str, bool]] = {}
    for entry in results:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise ValueError('each toolResults entry needs an "id"')
        if "error" in entry:
            by_id[entry["id"]] = (f"Error: {entry['error']}", False)
        elif "result" in entry:
            value = entry["result"]
            by_id[entry["id"]] = (value if isinstance(value, str) else json.dumps(value), True)
        else:
            raise ValueError(f'toolResults entry {entry["id"]!r} needs "result" or "error"')
    missing = [call.id for call in calls if call.id not in by_id]
    if missing:
        raise ValueError(f"toolResults has no result for the calls {missing}")
    return {call.id: by_id[call.id] for call in calls}
