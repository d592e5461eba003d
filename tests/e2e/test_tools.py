"""Tool calling: AGENT_TOOLS are offered to the model, executed, and fed back."""

from __future__ import annotations

import json

import pytest

from tests.e2e.harness import describe, kind_of, send_params, state_of, stream_results
from tests.e2e.wire import artifact_text, message_text
from tests.fakes.fake_llm import message_text as llm_text
from tests.fakes.fake_llm import text, tool_calls

pytestmark = pytest.mark.timeout(60)


def _tool_msgs(body):
    return [m for m in body["messages"] if m.get("role") == "tool"]


def test_tool_round_trip(rpc, fake_llm, marker):
    fake_llm.script(
        tool_calls([("add", {"a": 2, "b": 3})], when_user_contains=marker),
        text(["The sum ", "is 5."], when_user_contains=marker),
    )
    task = rpc.send(f"add 2 and 3 {marker}")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    assert artifact_text(task) == "The sum is 5."

    reqs = fake_llm.requests_for(marker)
    assert len(reqs) == 2, f"expected 2 model calls, got {len(reqs)}"
    second = reqs[1]["messages"]
    calls = [
        tc for m in second if m.get("role") == "assistant" for tc in (m.get("tool_calls") or [])
    ]
    assert len(calls) == 1 and calls[0]["function"]["name"] == "add", second
    assert json.loads(calls[0]["function"]["arguments"]) == {"a": 2, "b": 3}
    call_id = calls[0]["id"]
    tools = _tool_msgs(reqs[1])
    assert len(tools) == 1, second
    assert tools[0]["tool_call_id"] == call_id, tools
    assert "5" in llm_text(tools[0]), f"tool result should contain 5: {tools[0]}"
    roles = [m["role"] for m in second]
    assert roles.index("assistant") < roles.index("tool"), roles
    assert second[-1]["role"] == "tool", f"tool result should be the last message: {roles}"


def test_tools_are_offered_with_schemas(rpc, fake_llm, marker):
    fake_llm.script(text("no tools needed", when_user_contains=marker))
    rpc.send(f"hello {marker}")
    (req,) = fake_llm.requests_for(marker)
    tools = {t["function"]["name"]: t["function"] for t in req.get("tools") or []}
    assert set(tools) >= {"add", "slow_echo"}, f"tools offered: {sorted(tools)}"
    add = tools["add"]
    assert add.get("description", "").startswith("Add two integers"), add
    props = add["parameters"]["properties"]
    assert props["a"]["type"] == "integer" and props["b"]["type"] == "integer", add
    assert sorted(add["parameters"].get("required", [])) == ["a", "b"], add
    echo = tools["slow_echo"]["parameters"]
    assert echo["properties"]["text"]["type"] == "string", echo
    assert echo["properties"]["seconds"]["type"] == "number", echo
    assert echo.get("required") == ["text"], f"'seconds' has a default: {echo}"


def test_several_tool_calls_in_one_turn(rpc, fake_llm, marker):
    fake_llm.script(
        tool_calls(
            [("add", {"a": 1, "b": 2}), ("slow_echo", {"text": "pong", "seconds": 0.2})],
            when_user_contains=marker,
        ),
        text("done", when_user_contains=marker),
    )
    task = rpc.send(f"two tools {marker}")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    assert artifact_text(task) == "done"
    reqs = fake_llm.requests_for(marker)
    assert len(reqs) == 2
    asked = {
        tc["id"]: tc["function"]["name"]
        for m in reqs[1]["messages"]
        if m.get("role") == "assistant"
        for tc in (m.get("tool_calls") or [])
    }
    answers = {m["tool_call_id"]: llm_text(m) for m in _tool_msgs(reqs[1])}
    assert set(answers) == set(asked), f"tool results {answers} vs calls {asked}"
    by_name = {asked[i]: v for i, v in answers.items()}
    assert "3" in by_name["add"], by_name
    assert "pong" in by_name["slow_echo"], by_name


def test_tool_progress_is_streamed(rpc, fake_llm, marker):
    fake_llm.script(
        tool_calls([("add", {"a": 20, "b": 22})], when_user_contains=marker),
        text(["It is ", "42."], when_user_contains=marker),
    )
    with rpc.stream("SendStreamingMessage", send_params(f"stream tools {marker}")) as s:
        events = list(s.sse_events())
    results = stream_results(events, s.request_id)
    seq = describe(results)
    assert state_of(results[-1]) == "TASK_STATE_COMPLETED", seq
    progress = [
        r["statusUpdate"]
        for r in results
        if kind_of(r) == "statusUpdate"
        and state_of(r) == "TASK_STATE_WORKING"
        and "add" in message_text(r["statusUpdate"]["status"].get("message"))
    ]
    assert progress, f"no WORKING status update mentioning the tool 'add'\n{seq}"
    msg = progress[0]["status"]["message"]
    assert msg["role"] == "ROLE_AGENT", msg
    arts = "".join(
        p.get("text", "")
        for r in results
        if kind_of(r) == "artifactUpdate"
        for p in r["artifactUpdate"]["artifact"]["parts"]
    )
    assert arts == "It is 42.", seq
