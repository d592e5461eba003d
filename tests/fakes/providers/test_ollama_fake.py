"""Self-tests of the Ollama fake: its NDJSON stream, its refusals, and LiteLLM reading it."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from agent.llm.base import LLMError, LLMRequest, LLMResponse
from agent.llm.litellm import LiteLLMClient
from tests.fakes.providers.ollama import OllamaFake
from tests.fakes.providers.script import error, tool_calls

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


@pytest.fixture(scope="module")
def fake():
    with OllamaFake() as server:
        yield server


@pytest.fixture(autouse=True)
def _reset(fake):
    fake.reset()
    fake.models = None
    fake.require_key = False


def post(
    fake: OllamaFake, body: dict[str, Any], headers: dict[str, str] | None = None
) -> httpx.Response:
    return httpx.post(f"{fake.base_url}/api/chat", json=body, headers=headers or {}, timeout=10)


def test_a_stream_of_text_then_parallel_calls_then_the_counts(fake):
    fake.script(
        tool_calls(
            [("add", {"a": 1}), ("add", {"a": 2})],
            content=["one", "two"],
            usage={"input_tokens": 9, "output_tokens": 4},
        )
    )
    response = post(fake, {"model": "llama3.1", "messages": [{"role": "user", "content": "go"}]})
    assert response.headers["content-type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert [line["message"]["content"] for line in lines[:2]] == ["one", "two"]
    assert lines[2]["message"]["tool_calls"] == [
        {"function": {"name": "add", "arguments": {"a": 1}}},
        {"function": {"name": "add", "arguments": {"a": 2}}},
    ]
    assert [line["done"] for line in lines] == [False, False, False, True]
    assert (lines[-1]["prompt_eval_count"], lines[-1]["eval_count"], lines[-1]["done_reason"]) == (
        9,
        4,
        "stop",
    )


@pytest.mark.parametrize(
    ("message", "says"),
    [
        (
            {"role": "tool", "content": [{"type": "text", "text": "3"}]},
            "cannot unmarshal array into Go struct field ChatRequest.messages.content of type string",
        ),
        (
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "add", "arguments": '{"a": 1}'}}],
            },
            "cannot unmarshal string into Go struct field ChatRequest.messages.tool_calls.function.arguments",
        ),
    ],
)
def test_malformed_messages_are_refused_with_gos_decoding_error(fake, message, says):
    response = post(
        fake, {"model": "llama3.1", "messages": [{"role": "user", "content": "x"}, message]}
    )
    assert response.status_code == 400 and says in response.json()["error"]


def test_models_and_keys(fake):
    assert post(fake, {"messages": []}).json() == {"error": "model is required"}
    fake.models = {"llama3.1"}
    missing = post(fake, {"model": "qwen3", "messages": []})
    assert missing.status_code == 404 and "try pulling it first" in missing.json()["error"]
    fake.require_key = True
    assert post(fake, {"model": "llama3.1", "messages": []}).status_code == 401
    ok = post(
        fake,
        {"model": "llama3.1", "messages": [], "stream": False},
        {"authorization": "Bearer sk-test"},
    )
    assert ok.status_code == 200 and ok.json()["done"] is True


def test_a_mid_stream_error_is_an_error_line(fake):
    fake.script(error(500, "runner crashed", stream_error=True, chunks=["par"]))
    lines = post(
        fake, {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    ).text.splitlines()
    assert json.loads(lines[-1]) == {"error": "runner crashed"}


@IN_MODULE_LOOP
async def test_litellm_reads_a_parallel_round_and_the_counts(fake):
    fake.script(
        tool_calls(
            [("add", {"a": 1}), ("add", {"a": 2})],
            usage={"input_tokens": 9, "output_tokens": 4},
            when_user_contains="m-par",
        )
    )
    fake.script(error(503, "busy", when_user_contains="m-busy"))
    client = LiteLLMClient(model="ollama_chat/llama3.1", api_base=fake.base_url, num_retries=0)
    items = [
        i async for i in client.stream(LLMRequest(messages=[{"role": "user", "content": "m-par"}]))
    ]
    final = items[-1]
    assert isinstance(final, LLMResponse)
    assert [json.loads(c.arguments) for c in final.tool_calls] == [{"a": 1}, {"a": 2}]
    assert len({c.id for c in final.tool_calls}) == 2
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == (9, 4)
    with pytest.raises(LLMError):
        _ = [
            i
            async for i in client.stream(
                LLMRequest(messages=[{"role": "user", "content": "m-busy"}])
            )
        ]
