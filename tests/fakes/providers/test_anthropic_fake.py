"""Self-tests of the Anthropic fake: its stream on the wire, its refusals, and LiteLLM reading it."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from agent.llm.base import LLMError, LLMRequest, LLMResponse
from agent.llm.litellm import LiteLLMClient
from tests.fakes.providers.anthropic import AnthropicFake, cache_breakpoints
from tests.fakes.providers.script import error, text, tool_calls

pytestmark = [
    # The first call through LiteLLM imports it: a minute and more on a loaded machine.
    pytest.mark.timeout(240),
    # Pydantic warns, once a process, when LiteLLM's streaming types are first built (whichever
    # provider a worker drives first); it is LiteLLM's and harmless, not this module's.
    pytest.mark.filterwarnings(
        "ignore:Item 'summary' on TypedDict class 'ChatCompletionReasoningItem':UserWarning"
    ),
]
IN_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")
HEADERS = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01"}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
        },
    }
]


@pytest.fixture(scope="module")
def fake():
    with AnthropicFake() as server:
        yield server


@pytest.fixture(autouse=True)
def _reset(fake):
    fake.reset()


def post(fake: AnthropicFake, body: dict[str, Any], headers: dict[str, str] = HEADERS):
    return httpx.post(f"{fake.base_url}/v1/messages", json=body, headers=headers, timeout=10)


def events(response: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    out, name = [], None
    for line in response.text.splitlines():
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            data = json.loads(line.removeprefix("data: "))
            assert data["type"] == name, (name, data)
            out.append((name, data))
    return out


def request(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 100, "stream": True, "messages": messages, **extra}


def test_a_thinking_tool_round_streams_every_documented_event(fake):
    fake.script(tool_calls([("add", {"a": 1}), ("add", {"a": 2})], thinking="hmm, two sums"))
    got = events(post(fake, request([{"role": "user", "content": "go"}])))
    kinds = [k for k, _ in got]
    assert kinds[:2] == ["message_start", "ping"] and kinds[-2:] == [
        "message_delta",
        "message_stop",
    ]
    deltas = [d["delta"] for k, d in got if k == "content_block_delta"]
    assert "".join(d.get("thinking", "") for d in deltas) == "hmm, two sums"
    (signature,) = [d["signature"] for d in deltas if d["type"] == "signature_delta"]
    assert signature == fake.sign("hmm, two sums")
    starts = [d["content_block"] for k, d in got if k == "content_block_start"]
    assert [s["type"] for s in starts] == ["thinking", "tool_use", "tool_use"]
    arguments = [d["partial_json"] for d in deltas if d["type"] == "input_json_delta"]
    assert arguments[0] == "" and json.loads("".join(arguments[:3])) == {"a": 1}
    final = got[-2][1]
    assert final["delta"]["stop_reason"] == "tool_use"
    assert set(final["usage"]) >= {
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    }


def test_thinking_must_come_back_unchanged_with_its_tool_round(fake):
    fake.script(tool_calls([("add", {"a": 1})], thinking="plan"), text("done", times=3))
    start = {"role": "user", "content": "go"}
    got = events(post(fake, request([start], thinking={"type": "enabled", "budget_tokens": 1024})))
    tool_id = next(
        d["content_block"]["id"]
        for k, d in got
        if k == "content_block_start" and d["content_block"]["type"] == "tool_use"
    )
    use = {"type": "tool_use", "id": tool_id, "name": "add", "input": {"a": 1}}
    result = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": "1"}],
    }
    thinking = {"type": "thinking", "thinking": "plan", "signature": fake.sign("plan")}
    enabled = {"thinking": {"type": "enabled", "budget_tokens": 1024}}

    missing = post(
        fake, request([start, {"role": "assistant", "content": [use]}, result], **enabled)
    )
    assert missing.status_code == 400, missing.text
    assert missing.json()["error"]["type"] == "invalid_request_error"
    assert "Expected `thinking`" in missing.json()["error"]["message"]
    altered = {**thinking, "thinking": "plan!"}
    refused = post(
        fake, request([start, {"role": "assistant", "content": [altered, use]}, result], **enabled)
    )
    assert refused.status_code == 400 and "Invalid `signature`" in refused.text
    kept = post(
        fake, request([start, {"role": "assistant", "content": [thinking, use]}, result], **enabled)
    )
    assert kept.status_code == 200, kept.text
    # Without thinking enabled the same round needs no thinking block.
    assert (
        post(fake, request([start, {"role": "assistant", "content": [use]}, result])).status_code
        == 200
    )


@pytest.mark.parametrize(
    ("body", "headers", "status", "says"),
    [
        (
            {"messages": [{"role": "user", "content": "x"}], "model": "m"},
            HEADERS,
            400,
            "max_tokens: Field required",
        ),
        (
            request([{"role": "system", "content": "s"}, {"role": "user", "content": "x"}]),
            HEADERS,
            400,
            "top-level `system`",
        ),
        (
            request([{"role": "user", "content": "x"}]),
            {**HEADERS, "x-api-key": "wrong"},
            401,
            "invalid x-api-key",
        ),
        (
            request([{"role": "user", "content": "x"}]),
            {"x-api-key": "sk-test"},
            400,
            "anthropic-version",
        ),
    ],
)
def test_refusals_of_the_real_api(fake, body, headers, status, says):
    response = post(fake, body, headers)
    assert response.status_code == status, response.text
    assert response.json()["type"] == "error" and says in response.json()["error"]["message"]
    assert fake.records[-1].refused is not None


def test_an_unanswered_tool_use_and_a_stray_tool_result_are_refused(fake):
    use = {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {}}
    unanswered = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": "and?"},
    ]
    response = post(fake, request(unanswered))
    assert response.status_code == 400 and "toolu_1" in response.json()["error"]["message"]
    stray = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "hi"},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "1"}],
        },
    ]
    response = post(fake, request(stray))
    assert response.status_code == 400 and "unexpected `tool_use_id`" in response.text


def test_at_most_four_cache_breakpoints(fake):
    mark = {"cache_control": {"type": "ephemeral"}}
    system = [{"type": "text", "text": f"s{i}", **mark} for i in range(3)]
    two = request(
        [{"role": "user", "content": [{"type": "text", "text": "x", **mark}]}], system=system
    )
    assert cache_breakpoints(two) == 4 and post(fake, two).status_code == 200
    five = request(
        [{"role": "user", "content": [{"type": "text", "text": "x", **mark}]}],
        system=system,
        tools=[{"name": "t", "input_schema": {}, **mark}],
    )
    response = post(fake, five)
    assert response.status_code == 400 and "Found 5" in response.json()["error"]["message"]


def test_errors_carry_the_documented_shape_and_headers(fake):
    fake.script(error(429, retry_after="7"), error(529))
    limited = post(fake, request([{"role": "user", "content": "x"}]))
    assert limited.status_code == 429 and limited.headers["retry-after"] == "7"
    assert limited.json() == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "fake provider error"},
    }
    overloaded = post(fake, request([{"role": "user", "content": "x"}]))
    assert (
        overloaded.status_code == 529 and overloaded.json()["error"]["type"] == "overloaded_error"
    )


@IN_MODULE_LOOP
async def test_litellm_reads_a_parallel_round_and_the_usage(fake):
    usage = {"input_tokens": 21, "output_tokens": 8}
    fake.script(
        tool_calls([("add", {"a": 1}), ("add", {"a": 2})], usage=usage, when_user_contains="m-par")
    )
    client = LiteLLMClient(
        model="anthropic/claude-haiku-4-5", api_base=fake.base_url, api_key="sk-test"
    )
    items = [
        i
        async for i in client.stream(
            LLMRequest(messages=[{"role": "user", "content": "m-par"}], tools=TOOLS)
        )
    ]
    final = items[-1]
    assert isinstance(final, LLMResponse)
    assert [(c.name, json.loads(c.arguments)) for c in final.tool_calls] == [
        ("add", {"a": 1}),
        ("add", {"a": 2}),
    ]
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == (21, 8)
    (sent,) = fake.requests_for("m-par")
    assert sent.path == "/v1/messages" and sent.headers["x-api-key"] == "sk-test"


@IN_MODULE_LOOP
async def test_litellm_surfaces_a_mid_stream_overload_as_a_failure(fake):
    fake.script(error(529, stream_error=True, chunks=["par"], when_user_contains="m-mid"))
    client = LiteLLMClient(
        model="anthropic/claude-haiku-4-5", api_base=fake.base_url, api_key="sk-test"
    )
    with pytest.raises(LLMError):
        _ = [
            i
            async for i in client.stream(
                LLMRequest(messages=[{"role": "user", "content": "m-mid"}])
            )
        ]
