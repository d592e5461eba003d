"""Self-tests of the fake OpenAI server, driven through LiteLLM exactly as the agent will be."""

from __future__ import annotations

import json
import os
import time

import httpx
import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tests.fakes.fake_llm import FakeLLMServer, error, text, tool_calls

pytestmark = pytest.mark.timeout(60)

TOOLS = [
    {
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
]


@pytest.fixture(scope="module")
def llm():
    with FakeLLMServer() as server:
        yield server


@pytest.fixture(autouse=True)
def _reset(llm):
    llm.reset()
    yield


@pytest.fixture(scope="module")
def litellm_mod():
    import litellm

    litellm.telemetry = False
    return litellm


def _kw(llm):
    return {"model": "openai/fake-model", "api_base": llm.base_url, "api_key": "sk-test"}


async def test_streamed_text_arrives_chunk_by_chunk(llm, litellm_mod):
    llm.script(text(["Hel", "lo ", "world"], when_user_contains="m-text"))
    resp = await litellm_mod.acompletion(
        **_kw(llm),
        messages=[{"role": "user", "content": "say hi m-text"}],
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces, finish, usage = [], None, None
    async for ch in resp:
        if ch.choices:
            d = ch.choices[0].delta
            if d.content:
                pieces.append(d.content)
            finish = ch.choices[0].finish_reason or finish
        if getattr(ch, "usage", None):
            usage = ch.usage
    assert pieces == ["Hel", "lo ", "world"]
    assert finish == "stop"
    assert usage is not None and usage.total_tokens > 0
    (body,) = llm.requests_for("m-text")
    assert body["stream"] is True
    assert body["model"] == "fake-model"
    assert body["tools"][0]["function"]["name"] == "add"


async def test_streamed_tool_calls_reassemble(llm, litellm_mod):
    llm.script(
        tool_calls(
            [("add", {"a": 2, "b": 3}), ("add", '{"a": 10, "b": 20}')],
            when_user_contains="m-tools",
            arg_splits=3,
        )
    )
    resp = await litellm_mod.acompletion(
        **_kw(llm),
        messages=[{"role": "user", "content": "add m-tools"}],
        tools=TOOLS,
        stream=True,
    )
    chunks = [ch async for ch in resp]
    rebuilt = litellm_mod.stream_chunk_builder(chunks)
    msg = rebuilt.choices[0].message
    assert rebuilt.choices[0].finish_reason == "tool_calls"
    assert [tc.function.name for tc in msg.tool_calls] == ["add", "add"]
    assert [json.loads(tc.function.arguments) for tc in msg.tool_calls] == [
        {"a": 2, "b": 3},
        {"a": 10, "b": 20},
    ]
    ids = [tc.id for tc in msg.tool_calls]
    assert all(i.startswith("call_") for i in ids) and len(set(ids)) == 2

    # manual accumulation, as an agent loop typically does it
    acc: dict[int, dict] = {}
    for ch in chunks:
        if not ch.choices:
            continue
        for tc in ch.choices[0].delta.tool_calls or []:
            slot = acc.setdefault(tc.index, {"id": None, "name": "", "args": ""})
            slot["id"] = tc.id or slot["id"]
            if tc.function and tc.function.name:
                slot["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                slot["args"] += tc.function.arguments
    assert [json.loads(v["args"]) for _, v in sorted(acc.items())] == [
        {"a": 2, "b": 3},
        {"a": 10, "b": 20},
    ]
    assert [v["id"] for _, v in sorted(acc.items())] == ids


async def test_non_stream_text_and_tool_calls(llm, litellm_mod):
    llm.script(
        tool_calls([("add", {"a": 1, "b": 1})], when_user_contains="m-ns"),
        text("plain answer", when_user_contains="m-ns"),
    )
    r1 = await litellm_mod.acompletion(
        **_kw(llm), messages=[{"role": "user", "content": "m-ns"}], tools=TOOLS
    )
    tc = r1.choices[0].message.tool_calls[0]
    assert tc.function.name == "add" and json.loads(tc.function.arguments) == {"a": 1, "b": 1}
    r2 = await litellm_mod.acompletion(
        **_kw(llm),
        messages=[
            {"role": "user", "content": "m-ns"},
            {"role": "assistant", "content": None, "tool_calls": [tc.model_dump()]},
            {"role": "tool", "tool_call_id": tc.id, "content": "2"},
        ],
        tools=TOOLS,
    )
    assert r2.choices[0].message.content == "plain answer"
    second = llm.requests_for("m-ns")[1]
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": tc.id, "content": "2"}


async def test_error_status_surfaces_as_litellm_exception(llm, litellm_mod):
    llm.script(error(400, "bad things", when_user_contains="m-err", times=None))
    with pytest.raises(litellm_mod.BadRequestError) as ei:
        await litellm_mod.acompletion(
            **_kw(llm),
            messages=[{"role": "user", "content": "m-err"}],
            stream=True,
            num_retries=0,
        )
    assert "bad things" in str(ei.value)


async def test_finish_reason_override(llm, litellm_mod):
    llm.script(text(["trunc"], finish_reason="length", when_user_contains="m-len"))
    resp = await litellm_mod.acompletion(
        **_kw(llm), messages=[{"role": "user", "content": "m-len"}], stream=True
    )
    finishes = [ch.choices[0].finish_reason async for ch in resp if ch.choices]
    assert "length" in finishes


async def test_fallback_echo_and_keyed_matching(llm, litellm_mod):
    llm.script(text("for B", when_user_contains="key-B"), text("unkeyed"))
    rb = await litellm_mod.acompletion(**_kw(llm), messages=[{"role": "user", "content": "key-B"}])
    ra = await litellm_mod.acompletion(**_kw(llm), messages=[{"role": "user", "content": "A"}])
    rc = await litellm_mod.acompletion(**_kw(llm), messages=[{"role": "user", "content": "C"}])
    assert rb.choices[0].message.content == "for B"
    assert ra.choices[0].message.content == "unkeyed"
    assert rc.choices[0].message.content == "echo: C"
    assert len(llm.requests) == 3 and llm.pending == []


def test_delay_before_first_byte_and_disconnect_is_recorded(llm):
    llm.script(text("late", delay=5, when_user_contains="m-slow"))
    t0 = time.monotonic()
    with pytest.raises(httpx.ReadTimeout), httpx.Client(trust_env=False) as c:
        c.post(
            llm.base_url + "/chat/completions",
            json={
                "model": "fake-model",
                "messages": [{"role": "user", "content": "m-slow"}],
                "stream": True,
            },
            timeout=httpx.Timeout(5, read=0.5),
        )
    assert time.monotonic() - t0 < 3
    deadline = time.monotonic() + 3
    while llm.records_for("m-slow")[0].finished_at is None and time.monotonic() < deadline:
        time.sleep(0.02)
    rec = llm.records_for("m-slow")[0]
    assert rec.client_disconnected is True
    assert rec.finished_at is not None and rec.finished_at - rec.received_at < 3


def test_raw_sse_framing(llm):
    llm.script(text(["a", "b"], chunk_delay=0.05, when_user_contains="m-raw"))
    with httpx.Client(trust_env=False) as c:
        r = c.post(
            llm.base_url + "/chat/completions",
            json={
                "model": "fake-model",
                "messages": [{"role": "user", "content": "m-raw"}],
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        )
    assert r.headers["content-type"].startswith("text/event-stream")
    datas = [ln[len("data: ") :] for ln in r.text.splitlines() if ln.startswith("data: ")]
    assert datas[-1] == "[DONE]"
    objs = [json.loads(d) for d in datas[:-1]]
    assert all(o["object"] == "chat.completion.chunk" for o in objs)
    assert objs[-1]["choices"] == [] and objs[-1]["usage"]["total_tokens"] > 0
    assert [o["choices"][0]["delta"].get("content") for o in objs[1:3]] == ["a", "b"]
    assert objs[-2]["choices"][0]["finish_reason"] == "stop"


def test_tool_result_is_the_tool_message_the_model_was_sent(llm):
    def ask(messages):
        with httpx.Client(trust_env=False) as c:
            c.post(
                llm.base_url + "/chat/completions",
                json={"model": "fake-model", "messages": messages},
            )

    asked = {"role": "user", "content": "add m-tool"}
    ask([asked])
    with pytest.raises(AssertionError, match="no tool result in the requests for 'm-tool'"):
        llm.tool_result("m-tool")  # the model has not been told anything yet
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    ask(
        [
            asked,
            {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "5"},
        ]
    )
    ask(
        [
            {"role": "user", "content": "other"},
            {"role": "tool", "tool_call_id": "call_2", "content": "7"},
        ]
    )
    assert llm.tool_result("m-tool") == "5"
