"""Client-supplied tools: declared in `metadata.clientTools`, run by the client between turns."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.harness import assert_error, new_id
from tests.e2e.wire import assert_valid
from tests.fakes.fake_llm import text, tool_calls

pytestmark = pytest.mark.timeout(60)

LOCATION = {
    "name": "get_location",
    "description": "The user's current city, from the device.",
    "parameters": {
        "type": "object",
        "properties": {"precision": {"type": "string", "enum": ["city", "country"]}},
        "required": ["precision"],
    },
}


def message(text_: str, **fields: Any) -> dict[str, Any]:
    return {"messageId": new_id("m-"), "role": "ROLE_USER", "parts": [{"text": text_}], **fields}


def test_a_client_tool_round_trip(rpc, fake_llm, marker):
    fake_llm.script(
        tool_calls([("get_location", {"precision": "city"})], when_user_contains=marker),
        text("You are in Lyon.", when_user_contains=marker),
    )
    params = {"message": message(f"where am I? {marker}", metadata={"clientTools": [LOCATION]})}
    task = rpc.result("SendMessage", params)["task"]
    assert_valid("task", task)
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    [part] = task["status"]["message"]["parts"]
    [call] = part["data"]["toolCalls"]
    assert call["name"] == "get_location" and call["arguments"] == {"precision": "city"}
    # The model was offered the client's tool.
    [first] = fake_llm.requests_for(marker)
    assert "get_location" in {tool["function"]["name"] for tool in first["tools"]}

    results = {"toolResults": [{"id": call["id"], "result": {"city": "Lyon"}}]}
    answer = message("", taskId=task["id"], contextId=task["contextId"])
    answer["parts"] = [{"data": results}]
    done = rpc.result("SendMessage", {"message": answer})["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done["status"]
    assert done["artifacts"][0]["parts"][0]["text"] == "You are in Lyon."
    # The model read the client's result as the tool's.
    second = fake_llm.requests_for(marker)[1]
    tool_message = next(m for m in second["messages"] if m.get("role") == "tool")
    assert json.loads(tool_message["content"]) == {"city": "Lyon"}


def test_an_error_result_and_a_wrong_answer(rpc, fake_llm, marker):
    fake_llm.script(
        tool_calls([("get_location", {"precision": "city"})], when_user_contains=marker),
        text("Could not tell.", when_user_contains=marker),
    )
    params = {"message": message(f"where? {marker}", metadata={"clientTools": [LOCATION]})}
    task = rpc.result("SendMessage", params)["task"]
    call_id = task["status"]["message"]["parts"][0]["data"]["toolCalls"][0]["id"]
    # Plain text does not answer tool calls: -32602, and the task keeps waiting.
    wrong = message("here", taskId=task["id"])
    assert_error(rpc.error("SendMessage", {"message": wrong}), -32602)
    assert rpc.get_task(task["id"])["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    answer = message("", taskId=task["id"])
    answer["parts"] = [{"data": {"toolResults": [{"id": call_id, "error": "permission denied"}]}}]
    done = rpc.result("SendMessage", {"message": answer})["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    second = fake_llm.requests_for(marker)[1]
    tool_message = next(m for m in second["messages"] if m.get("role") == "tool")
    assert tool_message["content"] == "Error: permission denied"


def test_a_client_that_never_answers_can_cancel(rpc, fake_llm, marker):
    fake_llm.script(
        tool_calls([("get_location", {"precision": "city"})], when_user_contains=marker)
    )
    params = {"message": message(f"where? {marker}", metadata={"clientTools": [LOCATION]})}
    task = rpc.result("SendMessage", params)["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    canceled = rpc.result("CancelTask", {"id": task["id"]})
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"


@pytest.mark.parametrize(
    ("tool", "named"),
    [
        ({"name": "bad name!", "parameters": {"type": "object"}}, "metadata.clientTools[0].name"),
        ({"name": "t1", "parameters": {"type": "object", "properties": 3}}, "'t1'"),
        ({"name": "t2", "parameters": {"type": "string"}}, "'t2'"),
    ],
)
def test_invalid_declarations_are_refused_naming_the_tool(rpc, tool, named):
    params = {"message": message("x", metadata={"clientTools": [tool]})}
    error = rpc.error("SendMessage", params)
    assert_error(error, -32602)
    assert named in error["message"]
