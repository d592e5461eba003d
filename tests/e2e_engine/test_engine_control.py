"""Control tools (ask_user, finish), the model's finish_reason, and a transient provider error,
on a server with default engine settings."""

from __future__ import annotations

import pytest

from tests.e2e.harness import kind_of, send_params, state_of
from tests.e2e.wire import artifact_text, message_text
from tests.e2e_engine.engine_helpers import (
    assistant_calls,
    status_text,
    stream_send,
    tool_messages,
    tool_text,
    validated_task,
)
from tests.fakes.fake_llm import error, text, tool_calls

pytestmark = pytest.mark.timeout(90)

SERVER_ENV: dict[str, str] = {}  # defaults: ask_user and finish offered, LLM_NUM_RETRIES=2

QUESTION = "What is your name?"


def _user_texts(task):
    return [message_text(m) for m in task.get("history") or [] if m["role"] == "ROLE_USER"]


def _assert_ask_user_answered(fake_llm, marker, answer):
    reqs = fake_llm.requests_for(marker)
    assert len(reqs) == 2, f"expected 2 model calls, got {len(reqs)}"
    (call,) = assistant_calls(reqs[1])
    assert call["function"]["name"] == "ask_user", call
    (result,) = tool_messages(reqs[1])
    assert result["tool_call_id"] == call["id"], (result, call)
    assert tool_text(result) == answer, f"ask_user result should be the answer: {result}"
    assert reqs[1]["messages"][-1]["role"] == "tool", reqs[1]["messages"]


def test_ask_user_round_trip_with_send_message(rpc, fake_llm, marker):
    fake_llm.script(
        tool_calls([("ask_user", {"question": QUESTION})], when_user_contains=marker),
        text("Hello, Ada!", when_user_contains=marker),
    )
    first = f"greet me {marker}"
    task = validated_task(rpc.send(first))
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task["status"]
    question = task["status"]["message"]
    assert question["role"] == "ROLE_AGENT", question
    assert message_text(question) == QUESTION, question
    # the task waits: no more model calls, GetTask agrees
    assert len(fake_llm.requests_for(marker)) == 1
    waiting = validated_task(rpc.get_task(task["id"]))
    assert waiting["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", waiting["status"]

    done = validated_task(rpc.send("Ada", task_id=task["id"], context_id=task["contextId"]))
    assert done["id"] == task["id"] and done["contextId"] == task["contextId"], done
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done["status"]
    assert artifact_text(done) == "Hello, Ada!", done
    _assert_ask_user_answered(fake_llm, marker, "Ada")

    final = validated_task(rpc.get_task(task["id"]))
    assert final["status"]["state"] == "TASK_STATE_COMPLETED", final["status"]
    assert _user_texts(final) == [first, "Ada"], final.get("history")


def test_ask_user_round_trip_with_streams(rpc, fake_llm, marker):
    fake_llm.script(
        tool_calls([("ask_user", {"question": QUESTION})], when_user_contains=marker),
        text(["Nice to meet ", "you, Ada."], when_user_contains=marker),
    )
    first = f"stream a question {marker}"
    run = stream_send(rpc, send_params(first))
    assert run.final_state == "TASK_STATE_INPUT_REQUIRED", (
        f"the stream should close at INPUT_REQUIRED\n{run.seq}"
    )
    last = run.results[-1]
    assert kind_of(last) == "statusUpdate", run.seq
    assert message_text(last["statusUpdate"]["status"].get("message")) == QUESTION, last
    task_id, context_id = run.task_id, run.context_id

    answer = stream_send(rpc, send_params("Ada", task_id=task_id, context_id=context_id))
    assert answer.final_state == "TASK_STATE_COMPLETED", answer.seq
    for r in answer.results:
        body = r[kind_of(r)]
        got = body.get("id") if kind_of(r) == "task" else body.get("taskId")
        assert got == task_id, f"event on another task: {r}\n{answer.seq}"
    assert state_of(answer.results[0]) != "TASK_STATE_INPUT_REQUIRED", answer.seq
    assert answer.artifact_text() == "Nice to meet you, Ada.", answer.seq
    _assert_ask_user_answered(fake_llm, marker, "Ada")

    final = validated_task(rpc.get_task(task_id))
    assert final["status"]["state"] == "TASK_STATE_COMPLETED", final["status"]
    assert artifact_text(final) == "Nice to meet you, Ada.", final
    assert _user_texts(final) == [first, "Ada"], final.get("history")


def test_finish_tool_ends_the_turn_with_its_result(rpc, fake_llm, marker):
    fake_llm.script(
        tool_calls([("finish", {"result": "42"})], when_user_contains=marker),
        text("must not be asked for this", when_user_contains=marker),
    )
    task = validated_task(rpc.send(f"the answer to everything {marker}"))
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    assert artifact_text(task) == "42", task.get("artifacts")
    assert len(fake_llm.requests_for(marker)) == 1, "finish must end the turn: no more model calls"


def test_finish_reason_length_fails_the_task(rpc, fake_llm, marker):
    fake_llm.script(
        text(
            ["This answer is cut", " off in the mid"],
            finish_reason="length",
            when_user_contains=marker,
        ),
    )
    task = validated_task(rpc.send(f"write a novel {marker}"))
    assert task["status"]["state"] == "TASK_STATE_FAILED", task["status"]
    msg = status_text(task)
    assert "output token limit" in msg, f"failure should explain the token limit: {msg!r}"
    assert len(fake_llm.requests_for(marker)) == 1


def test_transient_provider_error_is_retried(rpc, fake_llm, marker):
    fake_llm.script(
        error(500, f"upstream hiccup {marker}", when_user_contains=marker),
        text("fine now", when_user_contains=marker),
    )
    task = validated_task(rpc.send(f"retry me {marker}"))
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    assert artifact_text(task) == "fine now", task.get("artifacts")
    records = fake_llm.records_for(marker)
    assert [r.step.status for r in records] == [500, None], records
    assert len(records) == 2, f"expected the 500 then one retry, got {len(records)} requests"


def test_a_model_without_a_known_price_has_usage_but_no_cost(rpc, fake_llm, marker):
    """`openai/fake-model` is in no price map: tokens and the model, never a made-up 0."""
    fake_llm.script(text("unpriced answer", when_user_contains=marker))
    task = validated_task(rpc.send(f"what does it cost {marker}"))
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    usage = task["metadata"]["usage"]
    assert usage["model"] == "openai/fake-model"
    assert (usage["promptTokens"], usage["completionTokens"]) == (10, 2)
    assert "costUsd" not in usage


def test_answer_text_around_a_question_is_one_artifact(rpc, fake_llm, marker):
    fake_llm.script(
        tool_calls(
            [("ask_user", {"question": QUESTION})], content="Let me ask.", when_user_contains=marker
        ),
        text(["Hello ", "Ada."], when_user_contains=marker),
    )
    before = stream_send(rpc, send_params(f"text then a question {marker}"))
    assert before.final_state == "TASK_STATE_INPUT_REQUIRED", before.seq
    assert before.artifact_text() == "Let me ask.", before.seq
    after = stream_send(rpc, send_params("Ada", task_id=before.task_id))
    assert after.final_state == "TASK_STATE_COMPLETED", after.seq

    chunks = [
        r["artifactUpdate"]
        for r in before.results + after.results
        if kind_of(r) == "artifactUpdate"
    ]
    assert len({c["artifact"]["artifactId"] for c in chunks}) == 1, (
        f"the answer should be one artifact across the suspension\n{before.seq}\n{after.seq}"
    )
    assert chunks[0].get("append") in (None, False) and all(c.get("append") for c in chunks[1:]), (
        f"{before.seq}\n{after.seq}"
    )
    assert chunks[-1].get("lastChunk") is True, after.seq
    streamed = before.artifact_text() + after.artifact_text()
    final = validated_task(rpc.get_task(before.task_id))
    assert len(final["artifacts"]) == 1, final["artifacts"]
    assert final["artifacts"][0]["artifactId"] == chunks[0]["artifact"]["artifactId"]
    assert artifact_text(final) == streamed == "Let me ask.\n\nHello Ada.", (
        artifact_text(final),
        streamed,
    )


def test_next_turn_sees_the_question_and_its_answer(rpc, fake_llm, marker):
    first, second = f"{marker}-first", f"{marker}-second"
    fake_llm.script(
        tool_calls([("ask_user", {"question": QUESTION})], when_user_contains=first),
        text("Hello, Ada!", when_user_contains=first),
        text("You are Ada.", when_user_contains=second),
    )
    task = rpc.send(f"greet me {first}")
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task["status"]
    done = rpc.send("Ada", task_id=task["id"], context_id=task["contextId"])
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done["status"]
    later = validated_task(rpc.send(f"who am I? {second}", context_id=task["contextId"]))
    assert later["status"]["state"] == "TASK_STATE_COMPLETED", later["status"]

    (req,) = fake_llm.requests_for(second)
    convo = [m for m in req["messages"] if m["role"] != "system"]
    assert [m["role"] for m in convo] == ["user", "assistant", "tool", "assistant", "user"], convo
    (call,) = convo[1]["tool_calls"]
    assert call["function"]["name"] == "ask_user", call
    assert convo[2]["tool_call_id"] == call["id"] and tool_text(convo[2]) == "Ada", convo[2]
    assert tool_text(convo[3]) == "Hello, Ada!", convo[3]
