"""The offline demo model calls a configured tool the user names (`add 2 3`)."""

from __future__ import annotations

from agent.llm.base import LLMRequest, LLMResponse
from agent.llm.demo import DemoModel, _named_call

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
NOTE = {
    "type": "function",
    "function": {
        "name": "note",
        "description": "Save a note.",
        "parameters": {
            "type": "object",
            "properties": {"title": {"type": "string"}, "body": {"type": "string"}},
            "required": ["title"],
        },
    },
}


def test_arguments_are_filled_in_order_and_typed() -> None:
    assert _named_call("add 2 3", [ADD]) == ("add", {"a": 2, "b": 3})
    assert _named_call("note shopping eggs and milk", [NOTE]) == (
        "note",
        {"title": "shopping", "body": "eggs and milk"},
    )
    assert _named_call("note shopping", [NOTE]) == ("note", {"title": "shopping"})


def test_no_call_when_the_words_do_not_fit() -> None:
    assert _named_call("add two 3", [ADD]) is None  # not an integer
    assert _named_call("add 2", [ADD]) is None  # `b` is required
    assert _named_call("add 2 3 4", [ADD]) is None  # a word left over
    assert _named_call("please add 2 3", [ADD]) is None  # the tool is not named first
    assert _named_call("text_stats hello", [ADD]) is None


async def test_the_model_calls_the_named_tool() -> None:
    request = LLMRequest(messages=[{"role": "user", "content": "add 2 3"}], tools=[ADD])
    [response] = [item async for item in DemoModel().stream(request)]
    assert isinstance(response, LLMResponse)
    [call] = response.tool_calls
    assert (call.name, call.arguments) == ("add", '{"a": 2, "b": 3}')
