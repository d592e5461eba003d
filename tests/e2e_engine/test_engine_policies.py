"""Human approvals, hooks from AGENT_HOOKS, tool timeouts and a provider that keeps failing, on a
server with approvals, the engine_hooks policy, LLM_NUM_RETRIES=1 and a 1 s tool timeout."""

from __future__ import annotations

import time

import pytest

from tests.e2e.harness import assert_error, send_params
from tests.e2e.wire import artifact_text, message_text
from tests.e2e_engine.conftest import ENGINE_HOOKS
from tests.e2e_engine.engine_helpers import (
    assert_tool_messages_follow_their_calls,
    assistant_calls,
    status_text,
    stream_send,
    tool_messages,
    tool_text,
    validated_task,
)
from tests.e2e_engine.engine_hooks import DENY_REASON, SUPPLIED_PREFIX
from tests.fakes.fake_llm import error, text, tool_calls

pytestmark = pytest.mark.timeout(90)

SERVER_ENV = {
    "AGENT_TOOLS_REQUIRING_APPROVAL": "secret_action",
    "AGENT_HOOKS": ENGINE_HOOKS,
    "AGENT_HOOK_FAILURE_MODE": "fail",
    "AGENT_TOOL_TIMEOUT_S": "1",
    "LLM_NUM_RETRIES": "1",
}

SECRET_RESULT = "secret action done on {}"


def _approval_part(task):
    """The data part of an INPUT_REQUIRED status message asking to approve a call."""
    msg = task["status"].get("message")
    assert msg, f"INPUT_REQUIRED without a status message: {task['status']}"
    assert msg["role"] == "ROLE_AGENT", msg
    datas = [p["data"] for p in msg["parts"] if "data" in p]
    assert len(datas) == 1, f"want exactly one data part in the question: {msg}"
    data = datas[0]
    assert set(data) == {"approval"}, data
    assert set(data["approval"]) == {"toolCallId", "name", "arguments"}, data
    return data["approval"]


def _ask_secret(rpc, fake_llm, marker, target="vault"):
    fake_llm.script(
        tool_calls([("secret_action", {"target": target})], when_user_contains=marker),
        text("secret business handled", when_user_contains=marker),
    )
    task = validated_task(rpc.send(f"do the secret thing {marker}"))
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task["status"]
    approval = _approval_part(task)
    assert approval["name"] == "secret_action", approval
    assert approval["arguments"] == {"target": target}, approval
    assert isinstance(approval["toolCallId"], str) and approval["toolCallId"], approval
    assert len(fake_llm.requests_for(marker)) == 1
    return task, approval


def _answer(task, text_or_parts):
    fields = {}
    if isinstance(text_or_parts, list):
        fields["parts"] = text_or_parts
        body = ""
    else:
        body = text_or_parts
    return send_params(body, task_id=task["id"], context_id=task["contextId"], **fields)


def _only_result(fake_llm, marker, approval):
    reqs = fake_llm.requests_for(marker)
    assert len(reqs) == 2, f"expected 2 model calls, got {len(reqs)}"
    (call,) = assistant_calls(reqs[1])
    assert call["id"] == approval["toolCallId"], (call, approval)
    (result,) = tool_messages(reqs[1])
    assert result["tool_call_id"] == call["id"], (result, call)
    return tool_text(result)


def test_approved_call_runs(rpc, fake_llm, marker):
    task, approval = _ask_secret(rpc, fake_llm, marker)
    text_part = message_text(
        {"parts": [p for p in task["status"]["message"]["parts"] if "text" in p]}
    )
    assert "secret_action" in text_part and "approve" in text_part, task["status"]

    # answer on a stream: the tool's progress shows up there, then the completion
    run = stream_send(rpc, _answer(task, "APPROVE"))
    assert run.task_id == task["id"], run.seq
    assert run.final_state == "TASK_STATE_COMPLETED", run.seq
    texts = [t for _, t, _ in run.progress()]
    assert "calling secret_action" in texts and "secret_action finished" in texts, run.seq
    assert run.artifact_text() == "secret business handled", run.seq
    assert _only_result(fake_llm, marker, approval) == SECRET_RESULT.format("vault")

    done = validated_task(rpc.get_task(task["id"]))
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done["status"]
    assert artifact_text(done) == "secret business handled"
    users = [message_text(m) for m in done.get("history") or [] if m["role"] == "ROLE_USER"]
    assert users == [f"do the secret thing {marker}", "APPROVE"], done.get("history")


def test_denied_call_with_reason_reaches_the_model_as_an_error(rpc, fake_llm, marker):
    task, approval = _ask_secret(rpc, fake_llm, marker)
    parts = [{"data": {"approved": False, "reason": "not today"}}]
    done = validated_task(rpc.result("SendMessage", _answer(task, parts))["task"])
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done["status"]
    content = _only_result(fake_llm, marker, approval)
    assert content.startswith("Error:"), content
    assert "denied" in content and "secret_action" in content, content
    assert "not today" in content, f"the user's reason should reach the model: {content!r}"
    assert "secret action done" not in content, content


def test_unrelated_answer_is_rejected_and_the_task_keeps_waiting(rpc, fake_llm, marker):
    task, approval = _ask_secret(rpc, fake_llm, marker)
    err = rpc.error("SendMessage", _answer(task, "maybe"))
    assert_error(err, -32602)
    assert "approve" in err["message"], err
    waiting = validated_task(rpc.get_task(task["id"]))
    assert waiting["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", waiting["status"]
    assert _approval_part(waiting) == approval
    time.sleep(0.2)
    assert len(fake_llm.requests_for(marker)) == 1, "a rejected answer must not resume the turn"

    # a data part without a boolean "approved" is rejected too
    err = rpc.error("SendMessage", _answer(task, [{"data": {"approved": "yes"}}]))
    assert_error(err, -32602)
    assert rpc.get_task(task["id"])["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"

    done = validated_task(rpc.result("SendMessage", _answer(task, "deny"))["task"])
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done["status"]
    content = _only_result(fake_llm, marker, approval)
    assert content.startswith("Error:") and "denied" in content, content


def test_approvals_one_at_a_time_then_all_results_in_call_order(rpc, fake_llm, marker):
    fake_llm.script(
        tool_calls(
            [
                ("add", {"a": 1, "b": 1}),
                ("secret_action", {"target": "alpha"}),
                ("secret_action", {"target": "beta"}),
            ],
            when_user_contains=marker,
        ),
        text("mixed results", when_user_contains=marker),
    )
    task = validated_task(rpc.send(f"three calls, two secret {marker}"))
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task["status"]
    first = _approval_part(task)
    assert first["arguments"] == {"target": "alpha"}, first

    again = validated_task(rpc.result("SendMessage", _answer(task, "approve"))["task"])
    assert again["id"] == task["id"]
    assert again["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", again["status"]
    second = _approval_part(again)
    assert second["arguments"] == {"target": "beta"}, second
    assert second["toolCallId"] != first["toolCallId"]
    assert len(fake_llm.requests_for(marker)) == 1

    done = validated_task(rpc.result("SendMessage", _answer(again, "Deny"))["task"])
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done["status"]
    reqs = fake_llm.requests_for(marker)
    assert len(reqs) == 2, f"expected 2 model calls, got {len(reqs)}"
    calls = assistant_calls(reqs[1])
    results = tool_messages(reqs[1])
    assert [m["tool_call_id"] for m in results] == [c["id"] for c in calls], (calls, results)
    assert [c["id"] for c in calls[1:]] == [first["toolCallId"], second["toolCallId"]], calls
    contents = [tool_text(m) for m in results]
    assert contents[0] == "2", contents
    assert contents[1] == SECRET_RESULT.format("alpha"), contents
    assert contents[2].startswith("Error:") and "denied" in contents[2], contents
    assert_tool_messages_follow_their_calls(reqs[1])


def test_hook_denies_a_tool(rpc, fake_llm, marker):
    fake_llm.script(
        tool_calls([("forbidden", {"target": "x"})], when_user_contains=marker),
        text("the policy said no", when_user_contains=marker),
    )
    run = stream_send(rpc, send_params(f"try the forbidden tool {marker}"))
    assert run.final_state == "TASK_STATE_COMPLETED", run.seq
    assert run.artifact_text() == "the policy said no", run.seq
    assert "calling forbidden" not in [t for _, t, _ in run.progress()], run.seq
    reqs = fake_llm.requests_for(marker)
    assert len(reqs) == 2, f"expected 2 model calls, got {len(reqs)}"
    (call,) = assistant_calls(reqs[1])
    (result,) = tool_messages(reqs[1])
    assert result["tool_call_id"] == call["id"]
    content = tool_text(result)
    assert content.startswith("Error:") and "denied" in content, content
    assert DENY_REASON in content, f"the hook's reason should reach the model: {content!r}"
    assert "FORBIDDEN TOOL RAN" not in content, content


def test_hook_supplies_a_tool_result(rpc, fake_llm, marker):
    fake_llm.script(
        tool_calls([("lookup", {"key": "k1"})], when_user_contains=marker),
        text("looked up", when_user_contains=marker),
    )
    task = validated_task(rpc.send(f"look k1 up {marker}"))
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    reqs = fake_llm.requests_for(marker)
    (result,) = tool_messages(reqs[1])
    assert tool_text(result) == f"{SUPPLIED_PREFIX} k1", result


def test_hook_that_raises_fails_the_task(rpc, fake_llm, marker):
    fake_llm.script(
        tool_calls([("explosive", {"x": 1})], when_user_contains=marker),
        text("never reached", when_user_contains=marker),
    )
    task = validated_task(rpc.send(f"light the fuse {marker}"))
    assert task["status"]["state"] == "TASK_STATE_FAILED", task["status"]
    msg = status_text(task)
    assert "hook" in msg and "approval hook exploded" in msg, msg
    assert "Traceback" not in msg
    assert len(fake_llm.requests_for(marker)) == 1


def test_tool_timeout_is_an_error_result(rpc, fake_llm, marker):
    fake_llm.script(
        tool_calls([("sleepy", {"seconds": 5})], when_user_contains=marker),
        text("too slow", when_user_contains=marker),
    )
    t0 = time.monotonic()
    run = stream_send(rpc, send_params(f"sleep too long {marker}"))
    assert time.monotonic() - t0 < 4.5, "the 1 s tool timeout did not cut the 5 s tool short"
    assert run.final_state == "TASK_STATE_COMPLETED", run.seq
    assert "sleepy failed" in [t for _, t, _ in run.progress()], run.seq
    (result,) = tool_messages(fake_llm.requests_for(marker)[1])
    content = tool_text(result)
    assert content.startswith("Error:") and "timed out" in content, content


def test_provider_that_keeps_failing_fails_the_task(rpc, fake_llm, marker):
    provider_text = f"upstream is on fire {marker}"
    fake_llm.script(error(500, provider_text, when_user_contains=marker, times=None))
    first = f"talk to a broken provider {marker}"
    task = validated_task(rpc.send(first))
    assert task["status"]["state"] == "TASK_STATE_FAILED", task["status"]
    msg = status_text(task)
    # The client is told what kind of failure it was; the provider's own words stay in the log.
    assert "the model provider returned an error" in msg, msg
    assert provider_text not in msg, f"the provider's error text reached the client: {msg!r}"
    assert "sk-test" not in msg, msg
    time.sleep(0.3)
    assert len(fake_llm.requests_for(marker)) == 2, (
        f"want 1 + LLM_NUM_RETRIES(1) = 2 attempts, got {len(fake_llm.requests_for(marker))}"
    )
    got = validated_task(rpc.get_task(task["id"]))
    assert got["status"]["state"] == "TASK_STATE_FAILED", got["status"]
    users = [m for m in got.get("history") or [] if m["role"] == "ROLE_USER"]
    assert [message_text(m) for m in users] == [first], got.get("history")


def test_permanent_provider_error_is_not_retried(rpc, fake_llm, marker):
    provider_text = f"bad request, no retry {marker}"
    fake_llm.script(error(400, provider_text, when_user_contains=marker, times=None))
    task = validated_task(rpc.send(f"a request the provider rejects {marker}"))
    assert task["status"]["state"] == "TASK_STATE_FAILED", task["status"]
    assert "rejected the request" in status_text(task), task["status"]
    assert provider_text not in status_text(task), task["status"]
    time.sleep(0.3)
    assert len(fake_llm.requests_for(marker)) == 1, "a 400 must not be retried"
