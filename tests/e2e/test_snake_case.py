"""Requests may use the proto snake_case field names (ProtoJSON accepts both spellings)."""

from __future__ import annotations

import pytest

from tests.e2e.harness import TERMINAL_STATES, assert_error, new_id
from tests.e2e.wire import artifact_text, assert_valid
from tests.fakes.fake_llm import text

pytestmark = pytest.mark.timeout(60)


def _msg(text_, **fields):
    return {"message_id": new_id("msg-"), "role": "ROLE_USER", "parts": [{"text": text_}], **fields}


def test_snake_case_send_and_get(rpc, fake_llm, marker):
    fake_llm.script(text("snake ok", delay=1.0, when_user_contains=marker))
    m = _msg(f"snake {marker}")
    res = rpc.result("SendMessage", {"message": m, "configuration": {"return_immediately": True}})
    assert_valid("send_message_response", res)
    task = res["task"]
    assert task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"), (
        f"return_immediately ignored? {task['status']}"
    )
    done = rpc.wait_for_state(task["id"], TERMINAL_STATES)
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert artifact_text(done) == "snake ok"
    assert any(h["messageId"] == m["message_id"] for h in done["history"]), done["history"]

    h0 = rpc.result("GetTask", {"id": task["id"], "history_length": 0})
    assert "history" not in h0, f"history_length ignored: {h0.get('history')}"
    h1 = rpc.result("GetTask", {"id": task["id"], "history_length": 1})
    assert len(h1["history"]) == 1, h1["history"]


def test_snake_case_context_id_continues_conversation(rpc, fake_llm, marker):
    t1 = rpc.send(f"first {marker}-1")
    t2 = rpc.result(
        "SendMessage", {"message": _msg(f"second {marker}-2", context_id=t1["contextId"])}
    )["task"]
    assert t2["contextId"] == t1["contextId"], "context_id ignored"
    (req,) = fake_llm.requests_for(f"{marker}-2")
    users = [m["content"] for m in req["messages"] if m["role"] == "user"]
    assert len(users) == 2, f"turn 1 missing from model input: {req['messages']}"


def test_snake_case_task_id_is_honoured(rpc, marker):
    err = rpc.error("SendMessage", {"message": _msg(f"x {marker}", task_id="no-such-task-snake")})
    assert_error(err, -32001)


def test_snake_case_send_history_length(rpc, marker):
    res = rpc.result(
        "SendMessage", {"message": _msg(f"h {marker}"), "configuration": {"history_length": 0}}
    )
    assert "history" not in res["task"], res["task"].get("history")


def test_snake_case_list_tasks(rpc, marker):
    t1 = rpc.send(f"list a {marker}")
    rpc.send(f"list b {marker}", context_id=t1["contextId"])
    res = rpc.result(
        "ListTasks", {"context_id": t1["contextId"], "page_size": 1, "include_artifacts": True}
    )
    assert_valid("list_tasks_response", res)
    assert len(res["tasks"]) == 1 and res["totalSize"] == 2, res
    assert res["tasks"][0].get("artifacts"), "include_artifacts ignored"
    nxt = rpc.result(
        "ListTasks",
        {"context_id": t1["contextId"], "page_size": 1, "page_token": res["nextPageToken"]},
    )
    assert len(nxt["tasks"]) == 1 and nxt["tasks"][0]["id"] != res["tasks"][0]["id"], nxt
