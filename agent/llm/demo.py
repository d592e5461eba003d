"""The built-in offline demo model: deterministic, no network, and it uses a tool.

It exists so that `make run` serves a working agent on a fresh machine. It goes through the same
loop as a real model: first it calls a tool (one the user names with arguments it can fill,
`add 2 3`; else the built-in `text_stats` on the user's message), then it answers from the tool's
result, streamed in small chunks. So a user who adds a tool (AGENT_TOOLS, an MCP server) sees it
run offline.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from agent.events import Usage
from agent.llm.base import LLMClient, LLMRequest, LLMResponse, LLMText
from stores.models import ToolCall

DEMO_MODEL_NAME = "demo"
_NOT_NAMED = {"text_stats", "ask_user", "finish"}  # the demo's own and the loop's control tools


def _argument(token: str, schema: dict[str, Any]) -> Any:
    """A word as a value of the parameter's JSON type (ValueError if it is not one)."""
    kind = schema.get("type")
    if kind == "integer":
        return int(token)
    if kind == "number":
        return float(token)
    if kind == "boolean":
        if token.lower() not in ("true", "false"):
            raise ValueError(token)
        return token.lower() == "true"
    return token


def _named_call(text: str, tools: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """`add 2 3`: a configured tool named by the first word, its parameters filled in order from
    the words after it (the last string parameter takes the rest); None if they do not fit."""
    words = text.split()
    if not words:
        return None
    for tool in tools:
        function = tool.get("function", {})
        if function.get("name") != words[0] or words[0] in _NOT_NAMED:
            continue
        parameters = function.get("parameters", {})
        properties: dict[str, Any] = parameters.get("properties", {})
        required = set(parameters.get("required", properties))
        values, rest = {}, words[1:]
        names = list(properties)
        for index, name in enumerate(names):
            if not rest:
                break
            schema = properties[name]
            last_string = schema.get("type") == "string" and index == len(names) - 1
            token = " ".join(rest) if last_string else rest[0]
            try:
                values[name] = _argument(token, schema)
            except ValueError:
                return None
            rest = [] if last_string else rest[1:]
        if rest or not required <= set(values):
            return None
        return words[0], values
    return None


class DemoModel(LLMClient):
    def __init__(self, *, chunk_delay_s: float = 0.01) -> None:
        self._chunk_delay_s = chunk_delay_s

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMText | LLMResponse]:
        messages = request.messages
        user_turns = [m for m in messages if m["role"] == "user"]
        user_text = str(user_turns[-1]["content"]) if user_turns else ""
        tool_names = {tool["function"]["name"] for tool in request.tools}
        usage = Usage(prompt_tokens=sum(len(str(m.get("content") or "").split()) for m in messages))
        last = messages[-1]
        named = _named_call(user_text, request.tools) if last["role"] == "user" else None
        if named is not None:
            name, arguments = named
            call = ToolCall(
                id=f"call_demo_{len(user_turns)}", name=name, arguments=json.dumps(arguments)
            )
            yield LLMResponse(
                content="", tool_calls=[call], finish_reason="tool_calls", usage=usage
            )
            return
        if last["role"] == "user" and "text_stats" in tool_names:
            call = ToolCall(
                id=f"call_demo_{len(user_turns)}",
                name="text_stats",
                arguments=json.dumps({"text": user_text}),
            )
            yield LLMResponse(
                content="", tool_calls=[call], finish_reason="tool_calls", usage=usage
            )
            return
        answer = self._answer(user_text, last, len(user_turns))
        words = answer.split(" ")
        for index, word in enumerate(words):
            await asyncio.sleep(self._chunk_delay_s)
            yield LLMText(text=word if index == len(words) - 1 else word + " ")
        yield LLMResponse(
            content=answer,
            tool_calls=[],
            finish_reason="stop",
            usage=Usage(prompt_tokens=usage.prompt_tokens, completion_tokens=len(words)),
        )

    @staticmethod
    def _answer(user_text: str, last: dict[str, object], turn_number: int) -> str:
        stats = ""
        if last["role"] == "tool":
            try:
                measured = json.loads(str(last["content"]))
                stats = (
                    f" That is {measured['words']} words and {measured['characters']} characters."
                )
            except (ValueError, KeyError, TypeError):
                stats = f" The tool said: {last['content']}."
        return (
            f'(demo model, offline) You said: "{user_text}".{stats}'
            f" This is message {turn_number} of our conversation."
            " Set LLM_MODEL to talk to a real model."
        )
