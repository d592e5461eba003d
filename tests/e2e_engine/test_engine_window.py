"""The history window (AGENT_HISTORY_MAX_MESSAGES) on a server with a small one."""

from __future__ import annotations

import pytest

from tests.e2e_engine.engine_helpers import (
    assert_tool_messages_follow_their_calls,
    tool_text,
    validated_task,
)
from tests.fakes.fake_llm import text, tool_calls

pytestmark = pytest.mark.timeout(90)

SERVER_ENV = {
    # small enough that the next turn's history window cuts into the previous turn's tool unit
    "AGENT_HISTORY_MAX_MESSAGES": "4",
}


def test_history_window_never_starts_inside_a_tool_unit(rpc, fake_llm, marker):
    first, second = f"{marker}-first", f"{marker}-second"
    fake_llm.script(
        tool_calls(
            [("add", {"a": 2, "b": 3}), ("add", {"a": 10, "b": 1})], when_user_contains=first
        ),
        text("5 and 11", when_user_contains=first),
        text("as I said", when_user_contains=second),
    )
    t1 = rpc.send(f"add twice {first}")
    assert t1["status"]["state"] == "TASK_STATE_COMPLETED", t1["status"]
    # the context now holds: user, assistant(2 calls), tool, tool, assistant — 5 messages
    t2 = validated_task(rpc.send(f"and now? {second}", context_id=t1["contextId"]))
    assert t2["status"]["state"] == "TASK_STATE_COMPLETED", t2["status"]

    (req,) = fake_llm.requests_for(second)
    convo = [m for m in req["messages"] if m["role"] != "system"]
    assert len(convo) <= 4, f"AGENT_HISTORY_MAX_MESSAGES=4 but {len(convo)} messages: {convo}"
    assert convo[-1]["role"] == "user" and second in tool_text(convo[-1]), convo
    assert convo[0]["role"] != "tool", f"the window starts with an orphaned tool result: {convo}"
    assert any(m["role"] == "assistant" and tool_text(m) == "5 and 11" for m in convo), convo
    assert_tool_messages_follow_their_calls(req)
