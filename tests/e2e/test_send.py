"""SendMessage: blocking and returnImmediately, the resulting Task, history, GetTask."""

from __future__ import annotations

import time

import pytest

from tests.e2e.harness import TERMINAL_STATES, user_message
from tests.e2e.wire import artifact_text, assert_valid, message_text, parts_text
from tests.fakes.fake_llm import last_user_text, text

pytestmark = pytest.mark.timeout(60)


def test_blocking_send_returns_completed_task_with_answer(rpc, fake_llm, marker):
    fake_llm.script(text(["The answer ", "is ", "42."], when_user_contains=marker))
    msg = user_message(f"What is the answer? {marker}")

    res = rpc.result("SendMessage", {"message": msg})

    assert_valid("send_message_response", res)
    assert set(res) == {"task"}, f"expected {{task}}, got {res}"
    task = res["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    assert task["id"] and task["contextId"], task

    artifacts = task.get("artifacts") or []
    assert len(artifacts) == 1, f"expected exactly one artifact: {artifacts}"
    parts = artifacts[0]["parts"]
    assert parts and all("text" in p for p in parts), parts
    assert parts_text(parts) == "The answer is 42."

    history = task.get("history") or []
    users = [m for m in history if m["role"] == "ROLE_USER"]
    agents = [m for m in history if m["role"] == "ROLE_AGENT"]
    assert [m["messageId"] for m in users] == [msg["messageId"]], history
    assert message_text(users[0]) == f"What is the answer? {marker}"
    assert agents, f"no ROLE_AGENT message in history: {history}"
    assert message_text(agents[-1]) == "The answer is 42.", agents
    assert history.index(users[0]) < history.index(agents[-1])
    for m in history:
        assert m.get("contextId") == task["contextId"], m
        assert m.get("taskId", task["id"]) == task["id"], m
    assert agents[-1].get("taskId") == task["id"], agents[-1]

    (req,) = fake_llm.requests_for(marker)
    assert last_user_text(req) == f"What is the answer? {marker}"


def test_context_id_is_generated_and_distinct(rpc, fake_llm, marker):
    t1 = rpc.send(f"one {marker}")
    t2 = rpc.send(f"two {marker}")
    assert t1["contextId"] and t2["contextId"]
    assert t1["contextId"] != t2["contextId"], "a new conversation must get a new contextId"
    assert t1["id"] != t2["id"]
    assert artifact_text(t1) == f"echo: one {marker}"  # fake's default reply
    assert artifact_text(t2) == f"echo: two {marker}"


def test_return_immediately_then_task_completes(rpc, fake_llm, marker):
    fake_llm.script(text(["slow ", "answer"], delay=1.5, when_user_contains=marker))
    t0 = time.monotonic()
    res = rpc.result(
        "SendMessage",
        {"message": user_message(f"hurry {marker}"), "configuration": {"returnImmediately": True}},
    )
    elapsed = time.monotonic() - t0
    assert_valid("send_message_response", res)
    task = res["task"]
    assert task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"), task
    assert elapsed < 1.5, f"returnImmediately took {elapsed:.2f}s (model delay is 1.5s)"

    done = rpc.wait_for_state(task["id"], TERMINAL_STATES, timeout=15)
    assert_valid("task", done)
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done["status"]
    assert done["contextId"] == task["contextId"]
    assert artifact_text(done) == "slow answer"


def test_get_task_returns_the_same_task(rpc, fake_llm, marker):
    fake_llm.script(text("stored answer", when_user_contains=marker))
    sent = rpc.send(f"remember {marker}")
    got = rpc.get_task(sent["id"])
    assert_valid("task", got)
    assert got["id"] == sent["id"] and got["contextId"] == sent["contextId"]
    assert got["status"]["state"] == "TASK_STATE_COMPLETED"
    assert got.get("artifacts") == sent.get("artifacts")
    assert [m["messageId"] for m in got.get("history", [])] == [
        m["messageId"] for m in sent.get("history", [])
    ]


def test_send_history_length_zero_omits_history(rpc, fake_llm, marker):
    fake_llm.script(text("no history please", when_user_contains=marker))
    res = rpc.result(
        "SendMessage",
        {"message": user_message(f"h0 {marker}"), "configuration": {"historyLength": 0}},
    )
    assert_valid("send_message_response", res)
    task = res["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "history" not in task, f"historyLength 0 must omit history: {task.get('history')}"
    assert artifact_text(task) == "no history please"


def test_get_task_history_length(rpc, fake_llm, marker):
    fake_llm.script(text("reply", when_user_contains=marker))
    task = rpc.send(f"hist {marker}")
    full = rpc.get_task(task["id"])["history"]
    assert len(full) >= 2, full

    h0 = rpc.get_task(task["id"], historyLength=0)
    assert_valid("task", h0)
    assert "history" not in h0, h0

    h1 = rpc.get_task(task["id"], historyLength=1)
    assert_valid("task", h1)
    assert [m["messageId"] for m in h1.get("history", [])] == [full[-1]["messageId"]], (
        f"historyLength 1 must return the most recent message only: {h1.get('history')}"
    )

    big = rpc.get_task(task["id"], historyLength=100)
    assert [m["messageId"] for m in big["history"]] == [m["messageId"] for m in full]
