"""Prompt caching for providers that take explicit breakpoints (Anthropic, Claude elsewhere).

A breakpoint (`cache_control: {"type": "ephemeral"}`) caches the request up to it; the request's
prefix is the tools, then the system prompt, then the messages. Two are set, within what the
request already has (the provider refuses more than `MAX_BREAKPOINTS` in all):

    1. the system prompt: the long stable part (with the tools before it) in one
    2. the last tool: the tool list alone stays cached when the system prompt changes

Other providers are sent nothing: OpenAI, Gemini and DeepSeek cache on their own, and an
unknown field is a refusal on some. LiteLLM reports what was read and written
(`usage_of` in `agent/llm/usage.py`).
"""

from __future__ import annotations

from typing import Any

CACHE_CONTROL = {"type": "ephemeral"}
MAX_BREAKPOINTS = 4
"""Anthropic: "A maximum of 4 blocks with cache_control may be provided"."""
_CLAUDE_HOSTS = frozenset({"bedrock", "vertex_ai", "vertex_ai_beta", "azure_ai"})


def takes_breakpoints(provider: str | None, model: str) -> bool:
    """Whether the provider caches only where the request says (LiteLLM's provider name)."""
    return provider == "anthropic" or (provider in _CLAUDE_HOSTS and "claude" in model.lower())


def _marked(item: Any) -> bool:
    return isinstance(item, dict) and item.get("cache_control") is not None


def _message_breakpoints(message: dict[str, Any]) -> int:
    content = message.get("content")
    blocks = sum(1 for block in content if _marked(block)) if isinstance(content, list) else 0
    return blocks or int(_marked(message))


def breakpoints_in(arguments: dict[str, Any]) -> int:
    """The breakpoints a request already has: its messages' (a hook's), its tools', and those
    its parameters ask LiteLLM for (LLM_PARAMS: `cache_control`, injection points)."""
    messages: list[dict[str, Any]] = arguments.get("messages") or []
    count = sum(_message_breakpoints(message) for message in messages)
    for tool in arguments.get("tools") or []:
        count += _marked(tool) or (isinstance(tool, dict) and _marked(tool.get("function")))
    count += _marked(arguments)  # a top-level `cache_control`: the provider places one
    for point in arguments.get("cache_control_injection_points") or []:
        role = point.get("role") if isinstance(point, dict) else None
        # A point by role marks every message of that role; counted high rather than low.
        count += max(1, sum(1 for message in messages if message.get("role") == role))
    return count


def mark_breakpoints(arguments: dict[str, Any]) -> None:
    """Set the system prompt's and the tool list's breakpoints in a call's `arguments`, as many
    as there is room for. New lists and dicts replace the marked ones: what the caller passed
    (the loop's messages, the toolbox's schemas) is not changed."""
    room = MAX_BREAKPOINTS - breakpoints_in(arguments)
    messages: list[dict[str, Any]] = arguments.get("messages") or []
    if room > 0 and messages and messages[0].get("role") == "system":
        system = messages[0]
        content = system.get("content")
        if isinstance(content, str) and content and not _marked(system):
            block = {"type": "text", "text": content, "cache_control": dict(CACHE_CONTROL)}
            arguments["messages"] = [{**system, "content": [block]}, *messages[1:]]
            room -= 1
        elif isinstance(content, list) and content and not _message_breakpoints(system):
            last = {**content[-1], "cache_control": dict(CACHE_CONTROL)}
            arguments["messages"] = [{**system, "content": [*content[:-1], last]}, *messages[1:]]
            room -= 1
    tools: list[dict[str, Any]] = arguments.get("tools") or []
    if (
        room > 0
        and tools
        and not any(_marked(tool) or _marked(tool.get("function")) for tool in tools)
    ):
        arguments["tools"] = [*tools[:-1], {**tools[-1], "cache_control": dict(CACHE_CONTROL)}]
