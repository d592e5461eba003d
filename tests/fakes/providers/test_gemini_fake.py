"""Self-tests of the Gemini fake: its stream on the wire, its refusals, and LiteLLM reading it."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from agent.llm.base import LLMRequest, LLMResponse
from agent.llm.litellm import LiteLLMClient
from tests.fakes.providers.gemini import GeminiFake
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
KEY = {"x-goog-api-key": "sk-test"}
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
    with GeminiFake() as server:
        yield server


@pytest.fixture(autouse=True)
def _reset(fake):
    fake.reset()
    fake.require_thought_signatures = False


def post(fake: GeminiFake, body: dict[str, Any], headers: dict[str, str] = KEY) -> httpx.Response:
    url = f"{fake.base_url}/models/gemini-x:streamGenerateContent?alt=sse"
    return httpx.post(url, json=body, headers=headers, timeout=10)


def events(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    return [
        json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ")
    ]


def user(text_: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text_}]}


def calls(*names: str, signature: str | None = None) -> dict[str, Any]:
    found = [{"functionCall": {"name": n, "args": {"a": 1}}} for n in names]
    if signature:
        found[0]["thoughtSignature"] = signature
    return {"role": "model", "parts": found}


def answers(*names: str) -> dict[str, Any]:
    return {
        "role": "user",
        "parts": [{"functionResponse": {"name": n, "response": {"r": 1}}} for n in names],
    }


def test_a_thinking_tool_round_streams_thought_then_signed_calls(fake):
    fake.script(tool_calls([("add", {"a": 1}), ("mul", {"a": 2})], thinking="two of them"))
    got = events(post(fake, {"contents": [user("go")]}))
    assert got[0]["candidates"][0]["content"]["parts"] == [{"text": "two of them", "thought": True}]
    parts = got[-1]["candidates"][0]["content"]["parts"]
    assert [p["functionCall"]["name"] for p in parts] == ["add", "mul"]
    assert (
        parts[0]["thoughtSignature"] == fake.sign("add", {"a": 1})
        and "thoughtSignature" not in parts[1]
    )
    assert got[-1]["candidates"][0]["finishReason"] == "STOP"
    assert all("usageMetadata" in event for event in got)
    assert got[-1]["usageMetadata"]["thoughtsTokenCount"] == 3


@pytest.mark.parametrize(
    ("contents", "says"),
    [
        ([{"role": "system", "parts": [{"text": "s"}]}, user("x")], "valid role"),
        ([user("x"), calls("add", "add"), answers("add")], "number of function response parts"),
        ([user("x"), calls("add", "mul"), answers("add", "add")], "do not match"),
        ([user("x"), answers("add")], "immediately after a function call turn"),
        ([calls("add"), answers("add")], "function call turn comes immediately after a user turn"),
    ],
)
def test_refusals_of_the_real_api(fake, contents, says):
    response = post(fake, {"contents": contents})
    assert response.status_code == 400, response.text
    assert (
        response.json()["error"]["status"] == "INVALID_ARGUMENT"
        and says in response.json()["error"]["message"]
    )


def test_matching_function_responses_in_proto_spelling_are_accepted(fake):
    proto = {
        "role": "user",
        "parts": [{"function_response": {"name": n, "response": {}}} for n in ("mul", "add")],
    }
    assert events(post(fake, {"contents": [user("x"), calls("add", "mul"), proto]}))


def test_keys_and_thought_signatures(fake):
    assert (
        post(fake, {"contents": [user("x")]}, {}).json()["error"]["status"] == "PERMISSION_DENIED"
    )
    wrong = post(fake, {"contents": [user("x")]}, {"x-goog-api-key": "nope"})
    assert wrong.status_code == 400 and "API key not valid" in wrong.json()["error"]["message"]
    fake.require_thought_signatures = True
    unsigned = post(fake, {"contents": [user("x"), calls("add"), answers("add")]})
    assert unsigned.status_code == 400 and "thought_signature" in unsigned.text
    signed = calls("add", signature=fake.sign("add", {"a": 1}))
    assert events(post(fake, {"contents": [user("x"), signed, answers("add")]}))


def test_errors_in_googles_shape(fake):
    fake.script(error(429, retry_after="3"), error(503))
    limited = post(fake, {"contents": [user("x")]})
    assert limited.status_code == 429 and limited.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert {
        "@type": "type.googleapis.com/google.rpc.RetryInfo",
        "retryDelay": "3s",
    } in limited.json()["error"]["details"]
    unavailable = post(fake, {"contents": [user("x")]})
    assert unavailable.status_code == 503 and unavailable.json()["error"]["status"] == "UNAVAILABLE"


@IN_MODULE_LOOP
async def test_litellm_reads_text_a_parallel_round_and_the_usage(fake):
    fake.script(
        text(
            ["Hel", "lo"],
            usage={"input_tokens": 7, "output_tokens": 5},
            when_user_contains="m-text",
        ),
        tool_calls([("add", {"a": 1}), ("add", {"a": 2})], when_user_contains="m-par"),
    )
    client = LiteLLMClient(
        model="gemini/gemini-2.5-flash", api_base=fake.base_url, api_key="sk-test"
    )
    items = [
        i async for i in client.stream(LLMRequest(messages=[{"role": "user", "content": "m-text"}]))
    ]
    final = items[-1]
    assert isinstance(final, LLMResponse) and final.content == "Hello"
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == (7, 5)
    items = [
        i
        async for i in client.stream(
            LLMRequest(messages=[{"role": "user", "content": "m-par"}], tools=TOOLS)
        )
    ]
    assert [json.loads(c.arguments) for c in items[-1].tool_calls] == [{"a": 1}, {"a": 2}]
    (sent,) = fake.requests_for("m-par")
    assert sent.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent" and sent.query == {
        "alt": ["sse"]
    }
