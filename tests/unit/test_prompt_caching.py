"""Prompt caching breakpoints (agent/llm/caching.py) and the usage counts read from LiteLLM
(agent/llm/usage.py): the system prompt first, then the last tool, within 4 breakpoints counting
those the request already has; nothing marked in place."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import pytest

from agent.events import Usage
from agent.llm.caching import breakpoints_in, mark_breakpoints, takes_breakpoints
from agent.llm.usage import usage_of

MARK = {"type": "ephemeral"}
TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("add", "echo")
]


def request(**extra: Any) -> dict[str, Any]:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    tools = copy.deepcopy(TOOLS)
    return {"model": "anthropic/claude-x", "messages": messages, "tools": tools, **extra}


def marked(arguments: dict[str, Any]) -> tuple[bool, bool]:
    """Whether the system prompt and the last tool carry a breakpoint."""
    system = arguments["messages"][0]["content"]
    on_system = isinstance(system, list) and system[-1].get("cache_control") == MARK
    return on_system, arguments["tools"][-1].get("cache_control") == MARK


def test_the_system_prompt_and_the_last_tool_are_marked_and_nothing_else() -> None:
    arguments = request()
    given = copy.deepcopy(arguments)
    messages, tools = arguments["messages"], arguments["tools"]
    mark_breakpoints(arguments)
    assert arguments["messages"][0] == {
        "role": "system",
        "content": [{"type": "text", "text": "Be brief.", "cache_control": MARK}],
    }
    assert arguments["messages"][1:] == given["messages"][1:]
    assert arguments["tools"] == [
        *given["tools"][:-1],
        {**given["tools"][-1], "cache_control": MARK},
    ]
    assert breakpoints_in(arguments) == 2
    assert (messages, tools) == (given["messages"], given["tools"])  # the caller's, unchanged


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"cache_control": MARK}, (True, True)),  # LLM_PARAMS' automatic one: 3 in all
        (
            {"cache_control_injection_points": [{"location": "message", "index": -1}] * 2},
            (True, True),
        ),
        (
            {"cache_control_injection_points": [{"location": "message", "role": "user"}] * 3},
            (True, False),
        ),
        (
            {"cache_control_injection_points": [{"location": "message", "index": 1}] * 4},
            (False, False),
        ),
        (
            {"cache_control_injection_points": [{"location": "message", "index": 0}] * 5},
            (False, False),
        ),
    ],
    ids=["top-level", "two-points", "three-by-role", "four", "five"],
)
def test_what_the_params_bring_is_counted_first(extra: dict, expected: tuple) -> None:
    arguments = request(**extra)
    mark_breakpoints(arguments)
    assert marked(arguments) == expected
    assert breakpoints_in(arguments) <= max(4, breakpoints_in(request(**extra)))


def test_what_a_hook_put_in_the_messages_is_counted_and_kept() -> None:
    hooked = [{"type": "text", "text": f"part {i}", "cache_control": MARK} for i in range(3)]
    arguments = request()
    arguments["messages"].append({"role": "user", "content": hooked})
    mark_breakpoints(arguments)
    assert marked(arguments) == (True, False)
    assert breakpoints_in(arguments) == 4
    # a system prompt of blocks has its last block marked, unless one already is
    blocks = {
        "role": "system",
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
    }
    arguments = request()
    arguments["messages"][0] = blocks
    mark_breakpoints(arguments)
    assert arguments["messages"][0]["content"] == [
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b", "cache_control": MARK},
    ]
    already = request(
        tools=[{**TOOLS[0], "function": {**TOOLS[0]["function"], "cache_control": MARK}}]
    )
    mark_breakpoints(already)
    assert marked(already) == (True, False) and breakpoints_in(already) == 2


@pytest.mark.parametrize(
    ("provider", "model", "takes"),
    [
        ("anthropic", "claude-sonnet-4-5", True),
        ("bedrock", "anthropic.claude-3-5-sonnet", True),
        ("vertex_ai", "claude-opus-4", True),
        ("bedrock", "amazon.nova-pro", False),
        ("openai", "gpt-4o-mini", False),
        ("gemini", "gemini-2.5-flash", False),
        (None, "whatever", False),
    ],
)
def test_only_providers_that_cache_where_told_are_marked(provider, model, takes) -> None:
    assert takes_breakpoints(provider, model) is takes


def test_usage_reads_reasoning_and_cache_counts_where_reported() -> None:
    anthropic = SimpleNamespace(
        prompt_tokens=63,
        completion_tokens=20,
        completion_tokens_details=SimpleNamespace(reasoning_tokens=4),
        prompt_tokens_details=SimpleNamespace(cached_tokens=40, cache_creation_tokens=12),
    )
    assert usage_of(anthropic) == Usage(
        prompt_tokens=63,
        completion_tokens=20,
        reasoning_tokens=4,
        cache_read_tokens=40,
        cache_write_tokens=12,
    )
    written_on_top = SimpleNamespace(
        prompt_tokens=5,
        completion_tokens=1,
        completion_tokens_details=None,
        prompt_tokens_details=SimpleNamespace(cached_tokens=None),
        cache_creation_input_tokens=3,
    )
    assert usage_of(written_on_top).cache_write_tokens == 3
    plain = SimpleNamespace(prompt_tokens=5, completion_tokens=2)
    assert usage_of(plain) == Usage(prompt_tokens=5, completion_tokens=2)
    assert usage_of(None) == Usage()
